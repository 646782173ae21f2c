// The ops the random API driver calls, each with its reference: small tables of the
// elementwise families (how to call the op, its element rule, which dtypes it takes) and
// reference functions for the other families, which also say when tide must refuse the
// call. Shared by the eager sequences, the traced bodies and the autograd graphs.
//
// The rules follow tide's documented semantics (README, ops/*.h), written independently of
// its kernels: a scalar meets a tensor converted to the tensor's dtype; masks are 0/1 in
// the input's dtype (float32 for integers); sums of integers are int64; max and argmax
// take the first NaN, else the first maximum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/api/api_ref.h"
#include "tide.h"

namespace tide::api {

// A reference result, or why tide must throw tide::Error at the call.
struct Expect {
  Ref r;
  std::string invalid;
};
inline Expect refuse(std::string why) { return {Ref{}, std::move(why)}; }

struct BinaryOp {
  const char* name;
  Tensor (*call)(const Tensor&, const Tensor&);
  const char* symbol;                          // the operator form ("+"), or nullptr
  Tensor (*op)(const Tensor&, const Tensor&);  // that operator
  El (*rule)(El a, El b, DType t);             // t: the operands' dtype
  bool floating_only;
  bool mask;     // 0/1 in mask_dtype(t)
  bool records;  // differentiable: attaches an autograd node
};
const std::vector<BinaryOp>& binary_ops();

// Tensor-scalar forms. `scalar_first`: s op a (rsub, rdiv and the operators s + a, ...).
struct ScalarOp {
  const char* name;
  Tensor (*call)(const Tensor&, double);
  const char* symbol;  // "a + s" / "s - a" operator form, or nullptr
  Tensor (*op)(const Tensor&, double);
  El (*rule)(El a, double s, DType t);  // s as passed (the rule converts it)
  bool floating_only;
  bool mask;
  bool records;
  bool any_scalar;  // integer tensors accept a fractional s (comparisons)
};
const std::vector<ScalarOp>& scalar_ops();

struct UnaryOp {
  const char* name;
  Tensor (*call)(const Tensor&);
  El (*rule)(El a, DType t);
  bool floating_only;
};
const std::vector<UnaryOp>& unary_ops();

// Masks are 0/1 in the input's dtype, float32 for integer inputs.
inline DType mask_dtype(DType t) { return is_floating(t) ? t : DType::float32; }

// ---- element rules shared with in-place ops ----------------------------------------------
El rule_add(El a, El b, DType t);
El rule_mul(El a, El b, DType t);
// a + alpha * b in t (add_ / sub_ with alpha): alpha converted to t first.
El rule_add_scaled(El a, El b, double alpha, DType t);

// ---- the other families ------------------------------------------------------------------
enum class Red { sum, mean, max, argmax };
const char* red_name(Red k);
Tensor red_call(Red k, const Tensor& a);  // over all elements
Tensor red_call(Red k, const Tensor& a, int axis, bool keepdim);
// `axis` nullopt: over all elements.
Expect reduce_ref(Red k, const Ref& a, std::optional<int> axis, bool keepdim);

Expect matmul_ref(const Ref& a, const Ref& b, bool trans_a, bool trans_b);
Expect linear_ref(const Ref& x, const Ref& w, const Ref& b, bool relu);
Expect transpose_ref(const Ref& a);
Expect softmax_ref(const Ref& a, bool log);
// A view (same store), as Tensor::reshape / slice / operator[] give.
Expect reshape_ref(const Ref& a, const std::vector<int64_t>& dims);
Expect slice_ref(const Ref& a, int64_t begin, int64_t end);
Expect select_ref(const Ref& a, int64_t i);
// cast(a, t). Floating values outside t's range (NaN included) are for the caller to
// leave out (KnownDefects::float_to_int).
Expect cast_ref(const Ref& a, DType t);

}  // namespace tide::api
