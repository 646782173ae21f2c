// The op tables and reference functions of the random API driver: see api_ops.h.
#include "tests/api/api_ops.h"

#include <algorithm>
#include <cmath>

namespace tide::api {

namespace {

// |x| * t without inf * 0: an exact operand (t == 0) adds nothing, even next to an inf.
double mt(double x, double t) { return t == 0 ? 0 : std::fabs(x) * t; }
// A scalar as the kernel sees it: converted to the tensor's floating dtype; integer
// tensors only meet integral scalars in arithmetic, and compare with s itself (tide
// rewrites x < 0.5 as x < 1, which is the same thing for integers).
double conv(double s, DType t) { return is_floating(t) ? to_dtype(s, t) : s; }
El exact(double s) { return {s, 0}; }

El rule_sub(El a, El b, DType t) { return finish(a.v - b.v, a.tol + b.tol, t); }
El rule_div(El a, El b, DType t) {
  double tol = 0;
  if (a.tol > 0 || b.tol > 0) {
    const double den = std::fabs(b.v) - b.tol;
    tol = den > 0 ? (mt(a.v, b.tol) + mt(b.v, a.tol)) / (std::fabs(b.v) * den) : kAny;
  }
  return finish(a.v / b.v, tol, t);
}
El rule_max(El a, El b, DType t) {
  const double v = std::isnan(a.v) ? a.v : std::isnan(b.v) ? b.v : (a.v > b.v ? a.v : b.v);
  return finish(v, std::max(a.tol, b.tol), t, 0);
}
// A comparison: exact unless the tolerances leave the order open.
El compare(El a, El b, bool result) {
  if (a.tol > 0 || b.tol > 0) {
    if (!(a.tol < kAny && b.tol < kAny) || std::isnan(a.v) || std::isnan(b.v) ||
        std::fabs(a.v - b.v) <= a.tol + b.tol)
      return {result ? 1.0 : 0.0, kAny};
  }
  return {result ? 1.0 : 0.0, 0};
}
El rule_eq(El a, El b, DType) { return compare(a, b, a.v == b.v); }
El rule_gt(El a, El b, DType) { return compare(a, b, a.v > b.v); }
El rule_lt(El a, El b, DType) { return compare(a, b, a.v < b.v); }
El rule_relu_grad(El g, El a, DType t) {
  if (a.tol > 0 && !(std::fabs(a.v) > a.tol)) return {0, kAny};
  return a.v > 0 ? finish(g.v, g.tol, t, 0) : El{0, 0};
}

El rule_pow(El a, double p, DType t) {
  if (p == 2.0) return rule_mul(a, a, t);  // the functor squares: a * a
  if (p == 1.0) return finish(a.v, a.tol, t, 0);
  const double q = conv(p, t);
  const double v = std::pow(a.v, q);
  double tol = 0;
  if (a.tol > 0) {
    double lo = std::fabs(a.v) - a.tol, hi = std::fabs(a.v) + a.tol;
    const bool integral = q == std::trunc(q);
    if ((!integral && a.v - a.tol <= 0) || (lo <= 0 && q < 1)) {
      tol = kAny;
    } else {
      lo = std::max(lo, 0.0);
      const double d = std::fabs(q) * std::max(std::pow(lo, q - 1), std::pow(hi, q - 1));
      tol = d * a.tol;
    }
  }
  return finish(v, tol, t, 4);
}

const double kTransUlps = 4;  // libm's float and double functions: within a few ulps

El u_neg(El a, DType t) { return finish(-a.v, a.tol, t, 0); }
El u_abs(El a, DType t) { return finish(std::fabs(a.v), a.tol, t, 0); }
El u_relu(El a, DType t) { return finish(a.v > 0 ? a.v : 0.0, a.tol, t, 0); }
El u_exp(El a, DType t) {
  const double v = std::exp(a.v);
  return finish(v, a.tol == 0 ? 0 : v * std::expm1(a.tol), t, kTransUlps);
}
El u_log(El a, DType t) {
  double tol = 0;
  if (a.tol > 0) tol = a.v > 2 * a.tol ? std::log(a.v / (a.v - a.tol)) : kAny;
  return finish(std::log(a.v), tol, t, kTransUlps);
}
El u_sqrt(El a, DType t) {
  double tol = 0;
  if (a.tol > 0) tol = a.v - a.tol >= 0 ? std::sqrt(a.v + a.tol) - std::sqrt(a.v - a.tol) : kAny;
  return finish(std::sqrt(a.v), tol, t, kTransUlps);
}
El u_sigmoid(El a, DType t) {
  const double x = a.v;
  const double v = x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
  return finish(v, 0.25 * a.tol, t, kTransUlps);
}
El u_tanh(El a, DType t) { return finish(std::tanh(a.v), a.tol, t, kTransUlps); }
// GELU: |gelu'| < 1.13 in both forms. The float kernels round the argument of erfc or exp,
// whose error the function scales by about x^2 (erf form) or 2 |u| (tanh form, u its tanh's
// argument): the ulps grow with it, up to where the result is x or 0 in double. The values
// through the identities the kernels use (erfc(-y) = 1 + erf(y), 1 + tanh(u) = 2 sigmoid(2u)),
// which also give their NaN at -inf.
El u_gelu(El a, DType t) {
  const double x = a.v;
  return finish(0.5 * x * std::erfc(-x / std::sqrt(2.0)), 1.13 * a.tol, t,
                kTransUlps + 4 + 2 * std::min(x * x, 2000.0));
}
El u_gelu_tanh(El a, DType t) {
  const double x = a.v;
  const double u2 = 2 * 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  const double v = u2 >= 0 ? x / (1 + std::exp(-u2)) : x * std::exp(u2) / (1 + std::exp(u2));
  return finish(v, 1.13 * a.tol, t, kTransUlps + 4 + 4 * std::min(std::fabs(u2), 800.0));
}

}  // namespace

El rule_add(El a, El b, DType t) { return finish(a.v + b.v, a.tol + b.tol, t); }
El rule_mul(El a, El b, DType t) {
  return finish(a.v * b.v, mt(a.v, b.tol) + mt(b.v, a.tol) + a.tol * b.tol, t);
}
El rule_add_scaled(El a, El b, double alpha, DType t) {
  const double al = conv(alpha, t);
  if (!is_floating(t)) return finish(a.v + al * b.v, a.tol + b.tol, t);
  // Two roundings: T(alpha) * b, then the sum.
  const El p = finish(al * b.v, mt(al, b.tol), t);
  return rule_add(a, p, t);
}

#define TIDE_API_BIN(fn) [](const Tensor& a, const Tensor& b) { return fn(a, b); }
#define TIDE_API_OP(sym) [](const Tensor& a, const Tensor& b) { return a sym b; }
const std::vector<BinaryOp>& binary_ops() {
  static const std::vector<BinaryOp> ops = {
      {"add", TIDE_API_BIN(add), "+", TIDE_API_OP(+), rule_add, false, false, true},
      {"sub", TIDE_API_BIN(sub), "-", TIDE_API_OP(-), rule_sub, false, false, true},
      {"mul", TIDE_API_BIN(mul), "*", TIDE_API_OP(*), rule_mul, false, false, true},
      {"div", TIDE_API_BIN(div), "/", TIDE_API_OP(/), rule_div, true, false, true},
      {"maximum", TIDE_API_BIN(maximum), nullptr, nullptr, rule_max, false, false, true},
      {"eq", TIDE_API_BIN(eq), nullptr, nullptr, rule_eq, false, true, false},
      {"gt", TIDE_API_BIN(gt), nullptr, nullptr, rule_gt, false, true, false},
      {"lt", TIDE_API_BIN(lt), nullptr, nullptr, rule_lt, false, true, false},
      {"relu_grad", TIDE_API_BIN(relu_grad), nullptr, nullptr, rule_relu_grad, false, false, false},
  };
  return ops;
}
#undef TIDE_API_BIN
#undef TIDE_API_OP

namespace {
// The scalar forms' rules: s converted as the kernel converts it, then the binary rule.
El s_add(El a, double s, DType t) { return rule_add(a, exact(conv(s, t)), t); }
El s_sub(El a, double s, DType t) { return rule_sub(a, exact(conv(s, t)), t); }
El s_rsub(El a, double s, DType t) { return rule_sub(exact(conv(s, t)), a, t); }
El s_mul(El a, double s, DType t) { return rule_mul(a, exact(conv(s, t)), t); }
El s_div(El a, double s, DType t) { return rule_div(a, exact(conv(s, t)), t); }
El s_rdiv(El a, double s, DType t) { return rule_div(exact(conv(s, t)), a, t); }
El s_max(El a, double s, DType t) { return rule_max(a, exact(conv(s, t)), t); }
El s_eq(El a, double s, DType t) { return rule_eq(a, exact(conv(s, t)), t); }
El s_gt(El a, double s, DType t) { return rule_gt(a, exact(conv(s, t)), t); }
El s_lt(El a, double s, DType t) { return rule_lt(a, exact(conv(s, t)), t); }
}  // namespace

#define TIDE_API_SC(fn) [](const Tensor& a, double s) { return fn(a, s); }
#define TIDE_API_SOP(expr) [](const Tensor& a, double s) { return expr; }
const std::vector<ScalarOp>& scalar_ops() {
  static const std::vector<ScalarOp> ops = {
      {"add", TIDE_API_SC(add), "a + s", TIDE_API_SOP(a + s), s_add, false, false, true, false},
      {"sub", TIDE_API_SC(sub), "a - s", TIDE_API_SOP(a - s), s_sub, false, false, true, false},
      {"rsub", TIDE_API_SOP(rsub(s, a)), "s - a", TIDE_API_SOP(s - a), s_rsub, false, false, true,
       false},
      {"mul", TIDE_API_SC(mul), "s * a", TIDE_API_SOP(s * a), s_mul, false, false, true, false},
      {"div", TIDE_API_SC(div), "a / s", TIDE_API_SOP(a / s), s_div, true, false, true, false},
      {"rdiv", TIDE_API_SOP(rdiv(s, a)), "s / a", TIDE_API_SOP(s / a), s_rdiv, true, false, true,
       false},
      {"maximum", TIDE_API_SC(maximum), nullptr, nullptr, s_max, false, false, true, false},
      {"eq", TIDE_API_SC(eq), nullptr, nullptr, s_eq, false, true, false, true},
      {"gt", TIDE_API_SC(gt), nullptr, nullptr, s_gt, false, true, false, true},
      {"lt", TIDE_API_SC(lt), nullptr, nullptr, s_lt, false, true, false, true},
      {"pow", TIDE_API_SC(pow), nullptr, nullptr, rule_pow, true, false, true, true},
  };
  return ops;
}
#undef TIDE_API_SC
#undef TIDE_API_SOP

#define TIDE_API_UN(fn) [](const Tensor& a) { return fn(a); }
const std::vector<UnaryOp>& unary_ops() {
  static const std::vector<UnaryOp> ops = {
      {"neg", TIDE_API_UN(neg), u_neg, false},
      {"abs", TIDE_API_UN(abs), u_abs, false},
      {"relu", TIDE_API_UN(relu), u_relu, false},
      {"exp", TIDE_API_UN(exp), u_exp, true},
      {"log", TIDE_API_UN(log), u_log, true},
      {"sqrt", TIDE_API_UN(sqrt), u_sqrt, true},
      {"sigmoid", TIDE_API_UN(sigmoid), u_sigmoid, true},
      {"tanh", TIDE_API_UN(tanh), u_tanh, true},
      {"gelu", TIDE_API_UN(gelu), u_gelu, true},
      {"gelu_tanh", [](const Tensor& a) { return gelu(a, GeluApprox::tanh); }, u_gelu_tanh, true},
  };
  return ops;
}
#undef TIDE_API_UN

// ---- reductions ----------------------------------------------------------------------

const char* red_name(Red k) {
  switch (k) {
    case Red::sum: return "sum";
    case Red::mean: return "mean";
    case Red::max: return "max";
    case Red::argmax: return "argmax";
  }
  return "?";
}

Tensor red_call(Red k, const Tensor& a) {
  switch (k) {
    case Red::sum: return sum(a);
    case Red::mean: return mean(a);
    case Red::max: return max(a);
    case Red::argmax: return argmax(a);
  }
  return {};
}

Tensor red_call(Red k, const Tensor& a, int axis, bool keepdim) {
  switch (k) {
    case Red::sum: return sum(a, axis, keepdim);
    case Red::mean: return mean(a, axis, keepdim);
    case Red::max: return max(a, axis, keepdim);
    case Red::argmax: return argmax(a, axis, keepdim);
  }
  return {};
}

namespace {
El reduce_els(Red k, const std::vector<El>& x, DType in, DType out) {
  bool any = false, nan = false;
  for (const El& e : x) {
    any |= !(e.tol < kAny);
    nan |= std::isnan(e.v);
  }
  if (any) return {0, kAny};
  if (k == Red::sum || k == Red::mean) {
    double s = 0, tol = 0, mag = 0;
    for (const El& e : x) {
      s += e.v;
      tol += e.tol;
      mag += std::fabs(e.v);
    }
    // The double accumulator's own rounding: n additions.
    if (is_floating(in)) tol += double(x.size() + 1) * unit(DType::float64) * mag;
    if (k == Red::sum) return finish(s, tol, out);
    if (x.empty()) return {NAN, 0};
    const double n = double(x.size());
    return finish(s / n, tol / n, out);
  }
  // max / argmax: the first NaN, else the first maximum.
  size_t best = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i].v)) {
      best = i;
      break;
    }
    if (x[i].v > x[best].v) best = i;
  }
  if (k == Red::max) return finish(x[best].v, nan ? 0 : x[best].tol, out, 0);
  if (!nan)
    for (size_t i = 0; i < x.size(); ++i)
      if (i != best && x[i].tol + x[best].tol > 0 &&
          std::fabs(x[i].v - x[best].v) <= x[i].tol + x[best].tol)
        return {double(best), kAny};  // too close to call
  return {double(best), 0};
}
}  // namespace

Expect reduce_ref(Red k, const Ref& a, std::optional<int> axis, bool keepdim) {
  const char* op = red_name(k);
  if (k == Red::mean && !is_floating(a.dtype)) return refuse(std::string(op) + " of integers");
  int64_t outer = 1, n = a.numel(), inner = 1;
  Shape out;
  if (axis) {
    const int nd = a.shape.ndim();
    if (nd == 0) return refuse("an axis of a 0-d tensor");
    if (*axis < -nd || *axis >= nd) return refuse("axis out of range");
    const int ax = *axis < 0 ? *axis + nd : *axis;
    outer = 1;
    inner = 1;
    for (int i = 0; i < ax; ++i) outer *= a.shape[i];
    n = a.shape[ax];
    for (int i = ax + 1; i < nd; ++i) inner *= a.shape[i];
    for (int i = 0; i < nd; ++i) {
      if (i != ax) out.push_back(a.shape[i]);
      else if (keepdim) out.push_back(1);
    }
  }
  if ((k == Red::max || k == Red::argmax) && n == 0) return refuse("empty reduction");
  const DType odt = k == Red::argmax                           ? DType::int64
                    : (k == Red::sum && !is_floating(a.dtype)) ? DType::int64
                                                               : a.dtype;
  Ref r = fresh(out, odt);
  std::vector<El> x(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t j = 0; j < n; ++j) x[size_t(j)] = a.at((o * n + j) * inner + i);
      r.set(o * inner + i, reduce_els(k, x, a.dtype, odt));
    }
  return {r, ""};
}

// ---- linear algebra --------------------------------------------------------------------

namespace {
bool finite_el(El e) { return std::isfinite(e.v) && e.tol < kAny; }
}  // namespace

Expect matmul_ref(const Ref& a, const Ref& b, bool ta, bool tb) {
  if (a.dtype != b.dtype) return refuse("dtypes differ");
  if (!is_floating(a.dtype)) return refuse("matmul of integers");
  if (a.shape.ndim() != 2 || b.shape.ndim() != 2) return refuse("matmul needs 2-D tensors");
  const int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  const int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
  if (k != kb) return refuse("inner dimensions differ");
  const DType t = a.dtype;
  Ref r = fresh(Shape{m, n}, t);
  auto A = [&](int64_t i, int64_t j) {
    return ta ? a.at(j * a.shape[1] + i) : a.at(i * a.shape[1] + j);
  };
  auto B = [&](int64_t i, int64_t j) {
    return tb ? b.at(j * b.shape[1] + i) : b.at(i * b.shape[1] + j);
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double v = 0, tol = 0, mag = 0;
      bool ok = true;
      for (int64_t p = 0; p < k; ++p) {
        const El x = A(i, p), y = B(p, j);
        ok &= finite_el(x) && finite_el(y);  // BLAS may skip or reorder non-finite terms
        v += x.v * y.v;
        tol += mt(x.v, y.tol) + mt(y.v, x.tol) + x.tol * y.tol;
        mag += std::fabs(x.v * y.v);
      }
      r.set(i * n + j, ok ? finish(v, tol + 2.0 * double(k + 1) * unit(t) * mag, t) : El{v, kAny});
    }
  return {r, ""};
}

Expect linear_ref(const Ref& x, const Ref& w, const Ref& b, bool relu) {
  if (x.dtype != w.dtype || x.dtype != b.dtype) return refuse("dtypes differ");
  if (!is_floating(x.dtype)) return refuse("linear of integers");
  if (x.shape.ndim() != 2 || w.shape.ndim() != 2 || b.shape.ndim() != 1 ||
      x.shape[1] != w.shape[0] || b.shape[0] != w.shape[1])
    return refuse("linear shapes do not fit");
  Expect e = matmul_ref(x, w, false, false);
  const int64_t m = x.shape[0], n = w.shape[1];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      El y = rule_add(e.r.at(i * n + j), b.at(j), x.dtype);
      if (relu && y.tol < kAny) y = finish(y.v > 0 ? y.v : 0, y.tol, x.dtype, 0);
      e.r.set(i * n + j, y);
    }
  return e;
}

Expect transpose_ref(const Ref& a) {
  if (a.shape.ndim() != 2) return refuse("transpose needs a 2-D tensor");
  const int64_t r = a.shape[0], c = a.shape[1];
  Ref y = fresh(Shape{c, r}, a.dtype);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) y.set(j * r + i, a.at(i * c + j));
  return {y, ""};
}

Expect softmax_ref(const Ref& a, bool log) {
  if (!is_floating(a.dtype)) return refuse("softmax of integers");
  if (a.shape.ndim() == 0) return refuse("softmax of a 0-d tensor");
  const int64_t n = a.shape[a.shape.ndim() - 1];
  const int64_t rows = n ? a.numel() / n : 0;
  const DType t = a.dtype;
  Ref y = fresh(a.shape, t);
  for (int64_t r = 0; r < rows; ++r) {
    bool ok = true;
    double m = -INFINITY, maxtol = 0;
    for (int64_t i = 0; i < n; ++i) {
      const El e = a.at(r * n + i);
      ok &= finite_el(e);
      m = std::max(m, e.v);
      maxtol = std::max(maxtol, e.tol);
    }
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(a.at(r * n + i).v - m);
    for (int64_t i = 0; i < n; ++i) {
      const double x = a.at(r * n + i).v;
      El e;
      if (!ok) e = {0, kAny};
      else if (log)
        e = finish(x - m - std::log(s), 2 * maxtol + 8 * unit(t) * (std::fabs(x - m) + std::log(s)),
                   t, 8);
      else {
        // x - m rounds to within unit(t) * |x - m|, which exp turns into that relative error.
        const double v = std::exp(x - m) / s;
        e = finish(v, 2 * maxtol + 2 * v * unit(t) * std::fabs(x - m), t, 8);
      }
      y.set(r * n + i, e);
    }
  }
  return {y, ""};
}

// ---- views and casts ---------------------------------------------------------------------

Expect reshape_ref(const Ref& a, const std::vector<int64_t>& dims) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (infer >= 0) return refuse("two extents are -1");
      infer = int(i);
    } else if (dims[i] < 0) {
      return refuse("a negative extent");
    } else {
      known *= dims[i];  // the driver's extents are small: no overflow
    }
  }
  if (dims.size() > size_t(kMaxDims)) return refuse("more than 8 dims");
  std::vector<int64_t> d = dims;
  if (infer >= 0) {
    if (known == 0 || a.numel() % known != 0) return refuse("cannot infer -1");
    d[size_t(infer)] = a.numel() / known;
  } else if (known != a.numel()) {
    return refuse("element counts differ");
  }
  return {view(a, Shape(d), a.off), ""};
}

Expect slice_ref(const Ref& a, int64_t begin, int64_t end) {
  if (a.shape.ndim() == 0) return refuse("slice of a 0-d tensor");
  const int64_t n = a.shape[0];
  if (!(0 <= begin && begin <= end && end <= n)) return refuse("rows out of range");
  Shape s = a.shape;
  s[0] = end - begin;
  const int64_t row = n ? a.numel() / n : 0;
  return {view(a, s, a.off + begin * row), ""};
}

Expect select_ref(const Ref& a, int64_t i) {
  if (a.shape.ndim() == 0) return refuse("select of a 0-d tensor");
  const int64_t n = a.shape[0];
  if (!(0 <= i && i < n)) return refuse("index out of range");
  std::vector<int64_t> rest(a.shape.begin() + 1, a.shape.end());
  return {view(a, Shape(rest), a.off + i * (a.numel() / n)), ""};
}

Expect cast_ref(const Ref& a, DType t) {
  Ref r = map1(a, t, [&](El e) -> El {
    if (is_floating(t)) return finish(e.v, e.tol, t, a.dtype == t ? 0 : 1);
    if (!is_floating(a.dtype)) {  // integer narrowing wraps (C++20)
      if (t == DType::int32) return {double(int32_t(int64_t(e.v))), e.tol};
      return e;
    }
    if (!(e.tol < kAny)) return {0, kAny};
    const double lo = std::trunc(e.v - e.tol), hi = std::trunc(e.v + e.tol);
    return {std::trunc(e.v), lo == hi ? 0 : kAny};  // a boundary within tolerance
  });
  return {r, ""};
}

}  // namespace tide::api
