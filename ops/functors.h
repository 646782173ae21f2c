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

}  // namespace tide::fn
