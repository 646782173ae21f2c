// The math of every elementwise op, one functor each, compiled by g++ for the CPU loops
// and by nvcc for CUDA kernels (TIDE_HOST_DEVICE). Binary functors take (a, b); unary
// ones (a); parameters (a scalar exponent, alpha) are members.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace tide::fn {

struct Add { template <class T> TIDE_HOST_DEVICE T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> TIDE_HOST_DEVICE T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> TIDE_HOST_DEVICE T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> TIDE_HOST_DEVICE T operator()(T a, T b) const { return a / b; } };
struct Maximum {
  // NaN-propagating, like NumPy's maximum.
  template <class T> TIDE_HOST_DEVICE T operator()(T a, T b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  }
};
struct Eq { template <class T> TIDE_HOST_DEVICE bool operator()(T a, T b) const { return a == b; } };
struct Gt { template <class T> TIDE_HOST_DEVICE bool operator()(T a, T b) const { return a > b; } };
struct Lt { template <class T> TIDE_HOST_DEVICE bool operator()(T a, T b) const { return a < b; } };
// a + alpha * b (add_ / sub_ with alpha)
struct AddScaled {
  double alpha;
  template <class T> TIDE_HOST_DEVICE T operator()(T a, T b) const { return a + T(alpha) * b; }
};
// Second operand only (copy_)
struct Second { template <class T> TIDE_HOST_DEVICE T operator()(T, T b) const { return b; } };

struct Neg { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return -a; } };
struct Exp { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return std::exp(a); } };
struct Log { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return std::log(a); } };
struct Sqrt { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return std::sqrt(a); } };
struct Abs { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return a < T(0) ? -a : a; } };
struct Relu { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return a > T(0) ? a : T(0); } };
// relu's gradient in one pass: g where the input a was positive, else 0.
struct ReluGrad {
  template <class T> TIDE_HOST_DEVICE T operator()(T g, T a) const { return a > T(0) ? g : T(0); }
};
struct Sigmoid {
  // Stable on both sides: never exp of a large positive number.
  template <class T> TIDE_HOST_DEVICE T operator()(T a) const {
    if (a >= T(0)) return T(1) / (T(1) + std::exp(-a));
    T e = std::exp(a);
    return e / (T(1) + e);
  }
};
struct Tanh { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return std::tanh(a); } };
struct Pow {
  double p;
  template <class T> TIDE_HOST_DEVICE T operator()(T a) const {
    if (p == 2.0) return a * a;
    if (p == 1.0) return a;
    return T(std::pow(a, T(p)));
  }
};
struct Identity { template <class T> TIDE_HOST_DEVICE T operator()(T a) const { return a; } };

// ---- fused optimizer updates (ops/optim.h) ------------------------------------------------
// One element of an in-place update: the state (p, buf / m, v) by reference, the gradient
// by value. A kernel first calls factors() once with the lr (and step count) it read from
// their tensors when it runs (STYLE 11), then the element operator with those factors: the
// per-element code sees only loop-invariant values of type T, so the loops vectorise. The
// order of operations follows the composed ops these replaced, so float results match
// them bit for bit, but for Adam's bias corrections (now computed in double from t).

// SGD with momentum, dampening, Nesterov and weight decay (PyTorch's formulas).
struct SgdUpdate {
  double momentum, dampening, weight_decay;
  bool nesterov;
  bool fresh;  // buf is uninitialised: buf = g (PyTorch's first step), never read

  template <class T> struct Factors {
    T lr, momentum, one_minus_dampening, weight_decay;
    bool with_momentum, with_decay, nesterov, fresh;
  };
  template <class T> TIDE_HOST_DEVICE Factors<T> factors(T lr) const {
    return {lr,           T(momentum),    T(1 - dampening), T(weight_decay),
            momentum != 0, weight_decay != 0, nesterov,        fresh};
  }
  template <class T>
  TIDE_HOST_DEVICE void operator()(T& p, T g, T& buf, const Factors<T>& k) const {
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

  template <class T> struct Factors {
    T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
    T decay;      // 1 - lr * weight_decay (AdamW)
    T step_size;  // lr / (1 - beta1^t)
    T sqrt_bc2;   // sqrt(1 - beta2^t)
    bool with_decay, decoupled, fresh;
  };
  // t >= 1: the number of this update.
  template <class T> TIDE_HOST_DEVICE Factors<T> factors(T lr, long long t) const {
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
            weight_decay != 0,
            decoupled,
            fresh};
  }
  template <class T>
  TIDE_HOST_DEVICE void operator()(T& p, T g, T& m, T& v, const Factors<T>& k) const {
    if (k.with_decay) {
      if (k.decoupled) p = p * k.decay;
      else g = g + p * k.weight_decay;
    }
    m = k.fresh ? k.one_minus_beta1 * g : m * k.beta1 + k.one_minus_beta1 * g;
    v = k.fresh ? k.one_minus_beta2 * (g * g) : v * k.beta2 + k.one_minus_beta2 * (g * g);
    p = p - (m * k.step_size) / (std::sqrt(v) / k.sqrt_bc2 + k.eps);
  }
};

}  // namespace tide::fn
