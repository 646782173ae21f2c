// The math of every elementwise op, one functor each, compiled by g++ for the CPU loops
// and by nvcc for CUDA kernels (TIDE_HOST_DEVICE). Binary functors take (a, b); unary
// ones (a); parameters (a scalar exponent, alpha) are members. Comparison functors are
// masks (kMask): their output is mask_t<T>. Transcendental functors on integer types
// compute in double (front-ends refuse integers for them; the kernels still compile).
// Functors never see the 16-bit storage types: kernels call them on widen(x), in float, and
// round the result to the 16-bit type (core/float16.h, compute_t).
//
// The lists at the end name every functor: the CPU and CUDA kernel files instantiate their
// entries for each one, so a new elementwise op adds its functor here and nothing else in
// ops/cpu/ or ops/cuda/.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/float16.h"
#include "core/host_device.h"

namespace tide::fn {

// Integers compute transcendental functions in double.
template <class T>
using Real = std::conditional_t<std::is_floating_point_v<T>, T, double>;

// Integer arithmetic wraps around (two's complement), as NumPy's and PyTorch's does: it is
// computed in the unsigned type, where wrapping is defined (signed overflow is undefined
// behaviour), and converted back (modular since C++20). Floating types compute as written.
template <class T, bool = std::is_integral_v<T> && !std::is_same_v<T, bool>>
struct WrapType {
  using type = T;
};
template <class T>
struct WrapType<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using Wrap = typename WrapType<T>::type;
template <class T>
TIDE_HOST_DEVICE T wrap_add(T a, T b) {
  return T(Wrap<T>(a) + Wrap<T>(b));
}
template <class T>
TIDE_HOST_DEVICE T wrap_sub(T a, T b) {
  return T(Wrap<T>(a) - Wrap<T>(b));
}
template <class T>
TIDE_HOST_DEVICE T wrap_mul(T a, T b) {
  return T(Wrap<T>(a) * Wrap<T>(b));
}
// Floating types flip the sign bit (IEEE negation: -(0.0) is -0.0, whose reciprocal is -inf);
// 0 - a would give +0.0.
template <class T>
TIDE_HOST_DEVICE T wrap_neg(T a) {
  if constexpr (std::is_floating_point_v<T>) return -a;
  else return T(Wrap<T>(0) - Wrap<T>(a));
}

struct Add {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a, T b) const {
    return wrap_add(a, b);
  }
};
struct Sub {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a, T b) const {
    return wrap_sub(a, b);
  }
};
struct Mul {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a, T b) const {
    return wrap_mul(a, b);
  }
};
struct Div {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a, T b) const {
    return a / b;
  }
};
struct Maximum {
  // NaN-propagating, like NumPy's maximum.
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a, T b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  }
};
struct Eq {
  static constexpr bool kMask = true;
  template <class T>
  TIDE_HOST_DEVICE bool operator()(T a, T b) const {
    return a == b;
  }
};
struct Gt {
  static constexpr bool kMask = true;
  template <class T>
  TIDE_HOST_DEVICE bool operator()(T a, T b) const {
    return a > b;
  }
};
struct Lt {
  static constexpr bool kMask = true;
  template <class T>
  TIDE_HOST_DEVICE bool operator()(T a, T b) const {
    return a < b;
  }
};
// An integer tensor compared for equality with a fractional scalar: never equal.
struct Never {
  static constexpr bool kMask = true;
  template <class T>
  TIDE_HOST_DEVICE bool operator()(T, T) const {
    return false;
  }
};
// a + alpha * b (add_ / sub_ with alpha)
struct AddScaled {
  double alpha;
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a, T b) const {
    return wrap_add(a, wrap_mul(T(alpha), b));
  }
};
// Second operand only (copy_)
struct Second {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T, T b) const {
    return b;
  }
};

struct Neg {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return wrap_neg(a);
  }
};
struct Exp {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return T(std::exp(Real<T>(a)));
  }
};
struct Log {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return T(std::log(Real<T>(a)));
  }
};
struct Sqrt {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return T(std::sqrt(Real<T>(a)));
  }
};
struct Abs {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fabs(a);  // clears the sign bit: abs(-0.0) is +0.0
    else return a < T(0) ? wrap_neg(a) : a;
  }
};
struct Relu {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return a > T(0) ? a : T(0);
  }
};
// relu's gradient in one pass: g where the input a was positive, else 0.
struct ReluGrad {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T g, T a) const {
    return a > T(0) ? g : T(0);
  }
};
// Dropout applied to x with its uniform draw u: x * scale where u >= p, else 0, scale being
// 1 / (1 - p), computed once by the front-end (ops/elementwise.h, dropout). The gradient
// applies the same functor to (g, u): the same mask, no second draw.
struct DropoutKeep {
  double p, scale;
  template <class T>
  TIDE_HOST_DEVICE T operator()(T x, T u) const {
    return u >= T(p) ? wrap_mul(x, T(scale)) : T(0);
  }
};
struct Sigmoid {
  // Stable on both sides: never exp of a large positive number.
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    using R = Real<T>;
    R x = R(a);
    if (x >= R(0)) return T(R(1) / (R(1) + std::exp(-x)));
    R e = std::exp(x);
    return T(e / (R(1) + e));
  }
};
struct Tanh {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return T(std::tanh(Real<T>(a)));
  }
};
// GELU, x * Phi(x) (PyTorch's approximate='none'), written 0.5 x erfc(-x / sqrt 2): the same
// function as 0.5 x (1 + erf(x / sqrt 2)) without the cancellation of 1 + erf for negative x,
// where float would keep few correct digits of the small result.
struct GeluErf {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    using R = Real<T>;
    const R x = R(a);
    return T(R(0.5) * x * std::erfc(x * R(-0.70710678118654752440)));
  }
};
// exp(v) for v <= 0 (0 below -87.3, where exp(v) nears a normal float's floor, 1.2e-38). For float
// on the host, Cody-Waite reduction and a degree-6 polynomial without a libm call, so that GCC
// vectorises the loops that call it (GELU's forward and backward were 30% of a GPT step as
// scalar expf calls); within 2 ulp of std::exp. double and the device use exp.
template <class R>
TIDE_HOST_DEVICE_INLINE R exp_nonpositive(R v) {
#if defined(__CUDA_ARCH__)
  return exp(v);
#else
  if constexpr (!std::is_same_v<R, float>) {
    return std::exp(v);
  } else {
    // Exactly 0 below -87.3 (a tiny normal times a weight would make denormals, which cost
    // ~100 cycles each): 2^k's bits masked off. A mask, not a second select on the same
    // comparison, which GCC turns into a branch in its AVX copies (no longer vectorised).
    const uint32_t keep = v < -87.3f ? 0u : ~0u;
    v = v < -87.3f ? -87.3f : v;
    // k = round(v / ln 2) (as ceil(t - 0.5): t <= 0), r = v - k ln 2 in [-ln2/2, ln2/2].
    const float t = v * 1.44269504088896341f;
    const int32_t k = int32_t(t - 0.5f);
    const float kf = float(k);
    const float r = (v - kf * 0.693359375f) - kf * -2.12194440e-4f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^k for k in [-126, 0]: the exponent field (0 where v underflows).
    const uint32_t bits = (uint32_t(k + 127) << 23) & keep;
    float scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    return p * scale;
  }
#endif
}

// GELU's tanh approximation (approximate='tanh'): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x +
// 0.044715 x^3), written x * sigmoid(2u), the same function without the cancellation of
// 1 + tanh(u) for negative x; sigmoid from e = exp(-|2u|) on both sides (no overflow), and
// no branch, so the loop vectorises.
struct GeluTanh {
  template <class T>
  TIDE_HOST_DEVICE_INLINE T operator()(T a) const {
    using R = Real<T>;
    const R x = R(a);
    const R u2 = R(2 * 0.79788456080286535588) * (x + R(0.044715) * x * x * x);
    const R e = exp_nonpositive(u2 >= R(0) ? -u2 : u2);
    const R num = u2 >= R(0) ? x : x * e;
    return T(num / (R(1) + e));
  }
};
// GELU's gradient (approximate='none') in one pass: g * (Phi(x) + x * phi(x)).
struct GeluErfGrad {
  template <class T>
  TIDE_HOST_DEVICE_INLINE T operator()(T g, T a) const {
    using R = Real<T>;
    const R x = R(a);
    const R cdf = R(0.5) * std::erfc(x * R(-0.70710678118654752440));
    const R pdf = R(0.39894228040143267794) * std::exp(R(-0.5) * x * x);  // 1 / sqrt(2 pi)
    return T(R(g) * (cdf + x * pdf));
  }
};
// The tanh approximation's gradient in one pass, with s = sigmoid(2u) = (1 + tanh u) / 2:
// g * (s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2)). Where s (1 - s) is 0 (|x| past
// about 11 in float) the second term is 0, not 0 * inf from a huge x^2.
struct GeluTanhGrad {
  template <class T>
  TIDE_HOST_DEVICE_INLINE T operator()(T g, T a) const {
    using R = Real<T>;
    const R x = R(a);
    const R beta = R(0.79788456080286535588);  // sqrt(2 / pi)
    const R u2 = R(2) * beta * (x + R(0.044715) * x * x * x);
    const R e = exp_nonpositive(u2 >= R(0) ? -u2 : u2);  // in (0, 1]: no overflow
    const R inv = R(1) / (R(1) + e);
    const R s = u2 >= R(0) ? inv : e * inv;
    const R c = u2 >= R(0) ? e * inv : inv;  // 1 - s
    const R sc = s * c;
    const R right = sc == R(0) ? R(0) : R(2) * x * sc * beta * (R(1) + R(3 * 0.044715) * x * x);
    return T(R(g) * (s + right));
  }
};
struct Pow {
  double p;
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    if (p == 2.0) return a * a;
    if (p == 1.0) return a;
    return T(std::pow(Real<T>(a), Real<T>(p)));
  }
};
struct Identity {
  template <class T>
  TIDE_HOST_DEVICE T operator()(T a) const {
    return a;
  }
};

// ---- conversions between dtypes (cast, from_data, integer fills) -----------------------------

// a as an O. Float to integer saturates, where C++'s conversion is undefined: NaN -> 0,
// values at or beyond the range (infinities included) -> O's min or max, others truncate
// toward zero. Every other pair is C++'s conversion: integer to integer wraps (C++20, as
// NumPy), to float rounds to nearest. A 16-bit side (bfloat16, float16) goes through float:
// from one, as float converts; to one, rounding float to nearest even (core/float16.h), so
// double and int64 round twice, as PyTorch's conversions do. The CPU and CUDA casts both
// call this, so they agree (but for NaN payloads through double: a GPU's double <-> float
// conversion gives the canonical NaN).
template <class O, class T>
TIDE_HOST_DEVICE O convert(T a) {
  if constexpr (is_half_v<T>) {
    return convert<O>(float(a));
  } else if constexpr (is_half_v<O>) {
    return O(float(a));
  } else if constexpr (std::is_floating_point_v<T> && std::is_integral_v<O>) {
    static_assert(sizeof(O) == 4 || sizeof(O) == 8, "int32 or int64");
    // 2^31 or 2^63: exact in float and double; every value strictly between -lim and lim
    // truncates to one O holds.
    constexpr T lim = sizeof(O) == 4 ? T(2147483648.0) : T(9223372036854775808.0);
    constexpr O max = sizeof(O) == 4 ? O(2147483647) : O(9223372036854775807LL);
    constexpr O min = O(-max - 1);
    if (a != a) return O(0);
    if (a >= lim) return max;
    if (a <= -lim) return min;
    return O(a);
  } else {
    return O(a);
  }
}

// ---- fused optimizer updates (ops/optim.h) ------------------------------------------------
// One element of an in-place update: the state (p, buf / m, v) by reference, the gradient
// by value. A kernel first calls factors() once with the lr (and step count) it read from
// their tensors when it runs (docs/contributing.md, Values that change between replays), then the
// element operator with those factors: the per-element code sees only loop-invariant values of type
// T, so the loops vectorise. The order of operations follows the composed ops these replaced, so
// float results match them bit for bit, but for Adam's bias corrections (now computed in double
// from t).
// A grad scale (clip_grad_norm's min(1, max_norm / (norm + 1e-6)), read from its tensor when the
// kernel runs) multiplies the gradient first, rounded to T, as an in-place g.mul_(scale) would:
// the update then matches a clip that rewrites the gradients bit for bit. A scale that is not
// finite (a GradScaler's overflow, a NaN norm) sets `skip`: the kernels then write nothing.

// Whether a grad scale skips the update: not finite (x * 0 is 0 only for finite x).
template <class T>
TIDE_HOST_DEVICE bool skips_update(const T* grad_scale) {
  return grad_scale && !(*grad_scale * T(0) == T(0));
}

// SGD with momentum, dampening, Nesterov and weight decay (PyTorch's formulas).
struct SgdUpdate {
  double momentum, dampening, weight_decay;
  bool nesterov;
  bool fresh;  // buf is uninitialised: buf = g (PyTorch's first step), never read

  template <class T>
  struct Factors {
    T lr, momentum, one_minus_dampening, weight_decay;
    T grad_scale;  // 1 unless scaled
    bool with_momentum, with_decay, nesterov, fresh, scaled;
    bool skip;  // the grad scale is not finite: no update at all
  };
  // grad_scale: nullptr, or the one element the gradient is multiplied by.
  template <class T>
  TIDE_HOST_DEVICE Factors<T> factors(T lr, const T* grad_scale = nullptr) const {
    return {lr,
            T(momentum),
            T(1 - dampening),
            T(weight_decay),
            grad_scale ? *grad_scale : T(1),
            momentum != 0,
            weight_decay != 0,
            nesterov,
            fresh,
            grad_scale != nullptr,
            skips_update(grad_scale)};
  }
  template <class T>
  TIDE_HOST_DEVICE void operator()(T& p, T g, T& buf, const Factors<T>& k) const {
    if (k.scaled) g = g * k.grad_scale;
    if (k.with_decay) g = g + p * k.weight_decay;
    if (k.with_momentum) {
      buf = k.fresh ? g : buf * k.momentum + k.one_minus_dampening * g;
      g = k.nesterov ? g + buf * k.momentum : buf;
    }
    p = p - g * k.lr;
  }
};

// Adam / AdamW (decoupled weight decay) with bias correction.
struct AdamUpdate {
  double beta1, beta2, eps, weight_decay;
  bool decoupled;
  bool fresh;  // m and v are uninitialised: taken as zero, never read

  template <class T>
  struct Factors {
    T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
    T decay;       // 1 - lr * weight_decay (AdamW)
    T step_size;   // lr / (1 - beta1^t)
    T sqrt_bc2;    // sqrt(1 - beta2^t)
    T grad_scale;  // 1 unless scaled
    bool with_decay, decoupled, fresh, scaled;
    bool skip;  // the grad scale is not finite: no update at all
  };
  // t >= 1: the number of this update. grad_scale: nullptr, or the one element the gradient
  // is multiplied by.
  template <class T>
  TIDE_HOST_DEVICE Factors<T> factors(T lr, long long t, const T* grad_scale = nullptr) const {
    double bc1 = 1.0 - std::pow(beta1, double(t));
    double bc2 = 1.0 - std::pow(beta2, double(t));
    return {T(beta1),
            T(1 - beta1),
            T(beta2),
            T(1 - beta2),
            T(eps),
            T(weight_decay),
            T(1) - lr * T(weight_decay),
            T(double(lr) / bc1),
            T(std::sqrt(bc2)),
            grad_scale ? *grad_scale : T(1),
            weight_decay != 0,
            decoupled,
            fresh,
            grad_scale != nullptr,
            skips_update(grad_scale)};
  }
  template <class T>
  TIDE_HOST_DEVICE void operator()(T& p, T g, T& m, T& v, const Factors<T>& k) const {
    if (k.scaled) g = g * k.grad_scale;
    if (k.with_decay) {
      if (k.decoupled) p = p * k.decay;
      else g = g + p * k.weight_decay;
    }
    m = k.fresh ? k.one_minus_beta1 * g : m * k.beta1 + k.one_minus_beta1 * g;
    v = k.fresh ? k.one_minus_beta2 * (g * g) : v * k.beta2 + k.one_minus_beta2 * (g * g);
    p = p - (m * k.step_size) / (std::sqrt(v) / k.sqrt_bc2 + k.eps);
  }
};

// nanoGPT's learning rate at iteration `it` (0 for the first step): linear warmup
// lr * (it + 1) / (warmup + 1) while it < warmup, then cosine from lr down to min_lr until
// it reaches decay_steps, min_lr after. In double; a negative it counts as 0.
struct WarmupCosine {
  double lr, min_lr;
  long long warmup, decay_steps;  // 0 <= warmup <= decay_steps

  TIDE_HOST_DEVICE double operator()(long long it) const {
    if (it < 0) it = 0;
    if (it < warmup) return lr * double(it + 1) / double(warmup + 1);
    // it == decay_steps gives min_lr exactly either way (cos(pi) is -1 in double); >= also
    // spares warmup == decay_steps its 0 / 0.
    if (it >= decay_steps) return min_lr;
    double ratio = double(it - warmup) / double(decay_steps - warmup);
    double coeff = 0.5 * (1.0 + std::cos(3.14159265358979323846 * ratio));
    return min_lr + coeff * (lr - min_lr);
  }
};

// ---- traits and lists ----------------------------------------------------------------------

// Masks (comparisons) give 0/1 in the input's dtype (the 16-bit ones included), float for
// integer inputs.
template <class F, class = void>
struct is_mask : std::false_type {};
template <class F>
struct is_mask<F, std::void_t<decltype(F::kMask)>> : std::bool_constant<F::kMask> {};
template <class F>
inline constexpr bool is_mask_v = is_mask<F>::value;
template <class T>
using mask_t = std::conditional_t<std::is_floating_point_v<T> || is_half_v<T>, T, float>;
// The output element type of binary functor F on inputs of type T (stored as T; a 16-bit T
// is loaded with widen() and the functor computes in float).
template <class F, class T>
using binary_out_t = std::conditional_t<is_mask_v<F>, mask_t<T>, T>;

}  // namespace tide::fn

// Every elementwise functor, by kind: X(Name) per functor (tide::fn::Name).
// clang-format off
#define TIDE_BINARY_FUNCTORS(X) \
  X(Add) X(Sub) X(Mul) X(Div) X(Maximum) X(AddScaled) X(Second) X(ReluGrad) X(GeluErfGrad) \
  X(GeluTanhGrad) X(DropoutKeep)
#define TIDE_MASK_FUNCTORS(X) X(Eq) X(Gt) X(Lt) X(Never)
#define TIDE_UNARY_FUNCTORS(X) \
  X(Neg) X(Exp) X(Log) X(Sqrt) X(Abs) X(Relu) X(Sigmoid) X(Tanh) X(GeluErf) X(GeluTanh) X(Pow) \
  X(Identity)
// clang-format on
// Every element type kernels compute in: X(T) per C++ type of tide's dtypes but the 16-bit
// storage types.
#define TIDE_DTYPES(X) X(float) X(double) X(int32_t) X(int64_t)
// Every element type, the 16-bit storage types included: for conversions and fills, and for the
// kernels that load a 16-bit T with widen() and compute in float (compute_t, core/float16.h).
#define TIDE_STORAGE_DTYPES(X) TIDE_DTYPES(X) X(bfloat16) X(float16)
