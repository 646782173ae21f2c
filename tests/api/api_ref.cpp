// The reference model of the random API driver: see api_ref.h.
#include "tests/api/api_ref.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <sstream>

namespace tide::api {

double unit(DType t) {
  switch (t) {
    case DType::float32: return std::ldexp(1.0, -24);
    case DType::float64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

double to_dtype(double v, DType t) {
  switch (t) {
    case DType::float32:
      return std::isfinite(v) && std::fabs(v) > FLT_MAX * 2 ? std::copysign(INFINITY, v)
                                                            : double(float(v));
    case DType::float64: return v;
    default: return std::isfinite(v) ? std::trunc(v) : v;
  }
}

bool fits(double v, DType t) {
  if (is_floating(t)) return true;
  if (!std::isfinite(v) || v != std::trunc(v)) return false;
  if (t == DType::int32) return v >= -2147483648.0 && v <= 2147483647.0;
  return std::fabs(v) < 9007199254740992.0;  // 2^53: exact in double too
}

El finish(double v, double tol_in, DType t, double ulps) {
  if (!(tol_in < kAny)) return {v, kAny};
  if (!is_floating(t)) return {v, tol_in == 0 ? 0 : kAny};
  if (std::isnan(v) || std::isinf(v)) return {v, tol_in == 0 ? 0 : kAny};
  const double big = t == DType::float32 ? FLT_MAX / 4 : DBL_MAX / 4;
  if (std::fabs(v) > big) return {to_dtype(v, t), kAny};
  const double r = to_dtype(v, t);
  // Subnormal results: a few of their (absolute) ulps.
  const double tiny = t == DType::float32 ? 1e-40 : 1e-300;
  return {r, tol_in + ulps * (unit(t) * std::fabs(r) + tiny)};
}

std::vector<double> Ref::values() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[size_t(i)] = at(i).v;
  return v;
}

Ref fresh(const Shape& s, DType t) {
  Ref r;
  r.shape = s;
  r.dtype = t;
  r.st = std::make_shared<Store>();
  r.st->v.assign(size_t(s.numel()), 0.0);
  r.st->tol.assign(size_t(s.numel()), 0.0);
  return r;
}

Ref from_values(const std::vector<double>& v, const Shape& s, DType t) {
  Ref r = fresh(s, t);
  for (int64_t i = 0; i < r.numel(); ++i) r.set(i, {to_dtype(v[size_t(i)], t), 0});
  return r;
}

Ref view(const Ref& base, const Shape& s, int64_t off) {
  Ref r = base;
  r.shape = s;
  r.off = off;
  return r;
}

std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  const int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> d(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    d[size_t(i)] = da == 1 ? db : da;
  }
  return Shape(d);
}

int64_t broadcast_index(const Shape& out, const Shape& in, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int d = out.ndim() - 1, k = in.ndim() - 1; d >= 0; --d, --k) {
    const int64_t coord = i % out[d];
    i /= out[d];
    if (k >= 0) {
      if (in[k] != 1) idx += coord * stride;
      stride *= in[k];
    }
  }
  return idx;
}

bool all_fit(const Ref& r) {
  for (int64_t i = 0; i < r.numel(); ++i)
    if (!fits(r.at(i).v, r.dtype)) return false;
  return true;
}

namespace {
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
}  // namespace

std::string mismatch(const Ref& r, const std::vector<double>& got, double extra_rel) {
  if (int64_t(got.size()) != r.numel())
    return "read " + std::to_string(got.size()) + " values, expected " + std::to_string(r.numel());
  std::ostringstream os;
  int shown = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const El e = r.at(i);
    const double g = got[size_t(i)];
    if (!(e.tol < kAny)) continue;
    bool ok;
    if (std::isnan(e.v)) ok = std::isnan(g);
    else if (std::isinf(e.v)) ok = g == e.v;
    else ok = std::fabs(g - e.v) <= e.tol + extra_rel * std::fabs(e.v);
    if (ok) continue;
    if (shown++ < 4)
      os << (shown > 1 ? "; " : "") << "element " << i << ": got " << num(g) << ", expected "
         << num(e.v) << " +- " << num(e.tol + extra_rel * std::fabs(e.v));
  }
  if (shown > 4) os << " (" << shown << " elements differ)";
  return os.str();
}

std::string preview(const std::vector<double>& v, size_t max) {
  std::string s = "{";
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + num(v[i]);
  if (v.size() > max) s += ", ... (" + std::to_string(v.size()) + ")";
  return s + "}";
}

}  // namespace tide::api
