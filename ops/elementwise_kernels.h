// The elementwise family's kernel entries (ops/kernel_entry.h): their arguments and the
// CPU implementations' declarations (ops/cpu/elementwise.cpp). CUDA's launchers are in
// ops/cuda/elementwise.cu. Every entry is instantiated for every functor of the lists in
// ops/functors.h and every dtype; O = fn::binary_out_t<F, T> for binary entries. A 16-bit T is
// loaded as float, computed in float and stored back (widen, core/float16.h), one rounding per
// op: the bits of the float32 op between casts. A scalar operand is held in the type the
// kernel computes in (float for the 16-bit types, as PyTorch keeps them), not rounded to T.
#pragma once

#include <cstdint>

#include "core/float16.h"
#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/broadcast.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// out[i] = f(a[i*sa], b[i*sb]) for i < n; sa, sb are 1 (dense) or 0 (one element).
template <class O, class T>
struct BinaryFlat {
  DataRef<T> a, b;
  DataRef<O> out;
  int64_t n = 0, sa = 1, sb = 1;
};
// out = f(a, b) with a and b broadcast to out's shape (g).
template <class O, class T>
struct BinaryBroadcast {
  DataRef<T> a, b;
  DataRef<O> out;
  BroadcastGeometry g;
};
// out[i] = f(a[i], s), or f(s, a[i]) when scalar_first.
template <class O, class T>
struct ScalarFlat {
  DataRef<T> a;
  DataRef<O> out;
  int64_t n = 0;
  compute_t<T> s{};
  bool scalar_first = false;
};
// out[i] = f(a[i]).
template <class T>
struct UnaryFlat {
  DataRef<T> a, out;
  int64_t n = 0;
};
// out[i] = O(a[i]) (cast between dtypes).
template <class O, class T>
struct Convert {
  DataRef<T> a;
  DataRef<O> out;
  int64_t n = 0;
};

namespace cpu {
template <class O, class T, class F>
void binary_flat(const KernelContext&, const BinaryFlat<O, T>&, const F&);
template <class O, class T, class F>
void binary_broadcast(const KernelContext&, const BinaryBroadcast<O, T>&, const F&);
template <class O, class T, class F>
void scalar_flat(const KernelContext&, const ScalarFlat<O, T>&, const F&);
template <class T, class F>
void unary_flat(const KernelContext&, const UnaryFlat<T>&, const F&);
template <class O, class T>
void convert(const KernelContext&, const Convert<O, T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
