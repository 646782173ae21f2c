// The 16-bit types through an op's float32 path (DESIGN §12: load 16-bit, compute in float32,
// store 16-bit), at the granularity of whole ops: the op's front-end casts its bfloat16 /
// float16 operands to float32 (queued, differentiable casts), runs its float32 self and casts
// the result back. Every device that has the float32 op and the casts runs it, autograd goes
// through the casts, and a trace records them. The cost: the casts' passes and float32
// temporaries. The elementwise ops, the GEMMs, the reductions (sum_to where one sum does),
// softmax / log_softmax, layer_norm, cross_entropy_rows, transpose, swap_axes, attention,
// take_rows and conv2d do not take it: their kernels read and write the 16-bit
// types directly (docs/mixed-precision.md).
#pragma once

#include <initializer_list>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/autocast.h"
#include "ops/creation.h"

namespace tide::detail {

// The 16-bit dtype all the defined floating tensors among `ts` share, or float32 when they do
// not all share one (then the op's own checks decide, as for any dtype).
inline DType shared_half(std::initializer_list<const Tensor*> ts) {
  DType d = DType::float32;
  for (const Tensor* t : ts) {
    if (!t->defined() || !is_floating(t->dtype())) continue;
    if (!is_half(t->dtype())) return DType::float32;
    if (d == DType::float32) d = t->dtype();
    else if (d != t->dtype()) return DType::float32;
  }
  return d;
}

// t cast to float32 when it is 16-bit, else t.
inline Tensor up(const Tensor& t) {
  return t.defined() && is_half(t.dtype()) ? cast(t, DType::float32) : t;
}

// A floating float32 result cast back to `half`; anything else (an int64 index) as it is.
inline Tensor down(const Tensor& t, DType half) {
  return t.defined() && t.dtype() == DType::float32 ? cast(t, half) : t;
}

// The op's float32 self, run by `f` on up()-cast operands, its result cast back to `half`.
// An autocast policy is suspended meanwhile: it already chose this op's dtype, and lowering
// the float32 operands again would come straight back here.
template <class F>
Tensor in_float32(DType half, F&& f) {
  autocast::Suspend float32_path;
  return down(f(), half);
}

}  // namespace tide::detail
