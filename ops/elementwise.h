// Elementwise ops with NumPy broadcasting, tensor-scalar forms and operators. Operands
// must share dtype and device ("[op] dtypes differ" otherwise). Arithmetic, maximum, abs,
// neg and comparisons accept every dtype; exp, log, sqrt, pow, sigmoid, tanh, gelu, dropout,
// div need a floating dtype. Comparisons give masks of 0/1 in the input's dtype (float32 for
// integer inputs). All queued; none waits.
//
// Scalars with integer tensors: the scalar is computed in the tensor's dtype, so it must be
// one that dtype holds. Every tensor-scalar op (comparisons included) and the factor of
// mul_ and the alpha of add_ / sub_ throw "[op] scalar 1e+30 is outside the range of int32
// [-2147483648, 2147483647], for a tensor of ..." for a value outside the range, and
// "... is not finite ..." for NaN and infinities, at the call. Arithmetic also refuses a
// fractional scalar; a comparison keeps its meaning (x < 0.5 is x < 1). Floating tensors
// take any double. Float-to-integer conversion of tensors: see cast (ops/creation.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/engine/engine.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tide {

// Binds a call site to the first operand of an operator, so errors raised while the op
// runs name the user's line (a default argument cannot follow an operator's operands).
struct At {
  const Tensor& t;
  Site site;
  At(const Tensor& t, Site site = Site::current()) : t(t), site(site) {}  // NOLINT
};

Tensor add(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor sub(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor mul(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor div(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor maximum(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor eq(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor gt(const Tensor& a, const Tensor& b, Site site = Site::current());
Tensor lt(const Tensor& a, const Tensor& b, Site site = Site::current());

Tensor add(const Tensor& a, double s, Site site = Site::current());
Tensor sub(const Tensor& a, double s, Site site = Site::current());
Tensor rsub(double s, const Tensor& a, Site site = Site::current());  // s - a
Tensor mul(const Tensor& a, double s, Site site = Site::current());
Tensor div(const Tensor& a, double s, Site site = Site::current());
Tensor rdiv(double s, const Tensor& a, Site site = Site::current());  // s / a
Tensor maximum(const Tensor& a, double s, Site site = Site::current());
Tensor eq(const Tensor& a, double s, Site site = Site::current());
Tensor gt(const Tensor& a, double s, Site site = Site::current());
Tensor lt(const Tensor& a, double s, Site site = Site::current());
Tensor pow(const Tensor& a, double exponent, Site site = Site::current());

Tensor neg(const Tensor& a, Site site = Site::current());
Tensor exp(const Tensor& a, Site site = Site::current());
Tensor log(const Tensor& a, Site site = Site::current());
Tensor sqrt(const Tensor& a, Site site = Site::current());
Tensor abs(const Tensor& a, Site site = Site::current());
Tensor relu(const Tensor& a, Site site = Site::current());
// relu's backward in one kernel: g where a > 0, else 0 (g and a broadcast like add). Not
// differentiable itself.
Tensor relu_grad(const Tensor& g, const Tensor& a, Site site = Site::current());
Tensor sigmoid(const Tensor& a, Site site = Site::current());
Tensor tanh(const Tensor& a, Site site = Site::current());

// GELU's two forms, as PyTorch's approximate='none' | 'tanh'.
enum class GeluApprox : uint8_t {
  none,  // x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  tanh   // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
};
// GELU (op gelu, or gelu_tanh for the approximation). Differentiable: the gradient keeps a.
Tensor gelu(const Tensor& a, GeluApprox approx = GeluApprox::none, Site site = Site::current());
// gelu's backward in one kernel: g * gelu'(a) for the form `approx` (g and a broadcast like
// add). Not differentiable itself.
Tensor gelu_grad(const Tensor& g, const Tensor& a, GeluApprox approx = GeluApprox::none,
                 Site site = Site::current());

// Dropout: x itself when !training or p == 0; otherwise x * keep / (1 - p), keep = (u >= p)
// with u = rand(x.shape(), x.dtype(), gen, x.device()), one draw whose counters are reserved
// at the call, so a seed gives the same mask on every device and in traced replays. One
// kernel besides the draw. Differentiable in x: the gradient applies the same mask and scale
// (no second draw). Throws "[dropout]" before anything is queued for p outside [0, 1) and for
// an undefined or non-floating x, whether training or not.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator(),
               Site site = Site::current());

inline Tensor operator+(At a, const Tensor& b) { return add(a.t, b, a.site); }
inline Tensor operator-(At a, const Tensor& b) { return sub(a.t, b, a.site); }
inline Tensor operator*(At a, const Tensor& b) { return mul(a.t, b, a.site); }
inline Tensor operator/(At a, const Tensor& b) { return div(a.t, b, a.site); }
inline Tensor operator+(At a, double s) { return add(a.t, s, a.site); }
inline Tensor operator-(At a, double s) { return sub(a.t, s, a.site); }
inline Tensor operator*(At a, double s) { return mul(a.t, s, a.site); }
inline Tensor operator/(At a, double s) { return div(a.t, s, a.site); }
inline Tensor operator+(double s, At a) { return add(a.t, s, a.site); }
inline Tensor operator-(double s, At a) { return rsub(s, a.t, a.site); }
inline Tensor operator*(double s, At a) { return mul(a.t, s, a.site); }
inline Tensor operator/(double s, At a) { return rdiv(s, a.t, a.site); }
inline Tensor operator-(At a) { return neg(a.t, a.site); }

namespace detail {
// Shared by the front-ends (not for users): throws "[op] <what> <s> is not finite",
// "... is outside the range of int32 [-2147483648, 2147483647]" or, with `integral`,
// "... is not an integer", each followed by `context`, unless the integer dtype `dtype`
// holds s. Does nothing for floating dtypes.
void check_scalar_fits(double s, DType dtype, const char* op, const char* what, bool integral,
                       const std::string& context = {});
// s as the shortest text that reads back as s ("1e+30", "0.5", "2147483648", "nan").
std::string format_scalar(double s);
}  // namespace detail

}  // namespace tide
