// The reference side of the random API driver (tests/api/): what a tensor must hold,
// computed in double precision from the references of its inputs, with an absolute
// tolerance per element that each op widens by its own rounding and by how much it
// amplifies its inputs' tolerances. Long random chains therefore stay checkable without
// false alarms, and a value the reference cannot bound (a comparison too close to call, a
// division by a value near 0) is marked kAny and not checked.
//
// Views share a store, as tide's views share a storage, so an in-place write through one
// alias shows in all of them. Not a second tide: plain loops over flat indices, no speed.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace tide::api {

// The tolerance of an element nothing can be said about.
inline constexpr double kAny = std::numeric_limits<double>::infinity();

// Unit roundoff: the relative error of one rounding to t (0 for integers: exact).
double unit(DType t);
// v as tide stores it in t: rounded for floating types, truncated toward 0 for integers
// (the caller keeps integer values in range: see fits()).
double to_dtype(double v, DType t);
// Whether v is an integer value t holds exactly, and double too (|v| < 2^53 for int64).
bool fits(double v, DType t);

// One element: its value and the absolute tolerance of a check against it.
struct El {
  double v = 0, tol = 0;
};

// The result of one op on one element: v converted to dtype t, the tolerance tol_in the
// inputs contribute plus `ulps` roundings of the result. Non-finite results are checked
// exactly when the inputs were exact, else not at all; so are results near overflow.
El finish(double v, double tol_in, DType t, double ulps = 2);

struct Store {
  std::vector<double> v, tol;
  // Filled from host data (from_vector / from_data) inside a traced body: see
  // KnownDefects::traced_write_to_host_data.
  bool traced_host_data = false;
};

struct Ref {
  Shape shape;
  DType dtype = DType::float32;
  std::shared_ptr<Store> st;
  int64_t off = 0;  // elements

  int64_t numel() const { return shape.numel(); }
  El at(int64_t i) const { return {st->v[size_t(off + i)], st->tol[size_t(off + i)]}; }
  void set(int64_t i, El e) {
    st->v[size_t(off + i)] = e.v;
    st->tol[size_t(off + i)] = e.tol;
  }
  std::vector<double> values() const;
  bool shares(const Ref& o) const { return st == o.st; }
};

// A fresh store of numel(s) exact zeros.
Ref fresh(const Shape& s, DType t);
// Exact values, converted to t.
Ref from_values(const std::vector<double>& v, const Shape& s, DType t);
// A view: the same store from element `off` of it.
Ref view(const Ref& base, const Shape& s, int64_t off);
// A copy into a fresh store, with another dtype: `rule` maps each element.
template <class F>
Ref map1(const Ref& a, DType out, F&& rule) {
  Ref r = fresh(a.shape, out);
  for (int64_t i = 0; i < a.numel(); ++i) r.set(i, rule(a.at(i)));
  return r;
}

// NumPy broadcasting; nullopt when the shapes do not broadcast.
std::optional<Shape> broadcast(const Shape& a, const Shape& b);
// The flat index into a tensor of shape `in` that element i of the broadcast shape `out`
// reads.
int64_t broadcast_index(const Shape& out, const Shape& in, int64_t i);

// out[i] = rule(a[.], b[.]) over the broadcast shape (which the caller checked exists).
template <class F>
Ref map2(const Ref& a, const Ref& b, const Shape& out_shape, DType out, F&& rule) {
  Ref r = fresh(out_shape, out);
  for (int64_t i = 0; i < r.numel(); ++i)
    r.set(i, rule(a.at(broadcast_index(out_shape, a.shape, i)),
                  b.at(broadcast_index(out_shape, b.shape, i))));
  return r;
}

// Whether every element of r is a value its dtype holds (integers in range).
bool all_fit(const Ref& r);

// Empty when `got` (a tensor read back as double) matches r within its tolerances, plus
// `extra_rel` relative slack; else the first mismatching elements, described.
std::string mismatch(const Ref& r, const std::vector<double>& got, double extra_rel = 0);

// Up to `max` values of a vector, for the call log: "{1, 2.5, nan, ...}".
std::string preview(const std::vector<double>& v, size_t max = 6);

}  // namespace tide::api
