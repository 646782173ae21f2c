#include "core/shape.h"

#include "core/error.h"

namespace tide {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

namespace {
// Refuses an element count above kMaxNumel (checked products: the extents may be up to
// 2^63 each, and a wrapped product could look small). A zero extent makes any shape empty.
void check_numel(std::span<const int64_t> dims, const Shape& s) {
  int64_t n = 1;
  bool empty = false, over = false;
  for (int64_t v : dims) {
    if (v == 0) empty = true;
    if (over || empty) continue;
    if (__builtin_mul_overflow(n, v, &n) || n > kMaxNumel) over = true;
  }
  TIDE_CHECK(empty || !over, "shape", "shape ", s.str(),
             " has more than 2^60 elements "
             "(tide's limit, so that byte counts fit in 64 bits)");
}
}  // namespace

Shape::Shape(std::span<const int64_t> dims) {
  TIDE_CHECK(dims.size() <= kMaxDims, "shape", "at most ", kMaxDims, " dims, got ", dims.size());
  for (int64_t v : dims) TIDE_CHECK(v >= 0, "shape", "negative extent ", v);
  ndim_ = int(dims.size());
  for (int i = 0; i < ndim_; ++i) d_[i] = dims[i];
  check_numel(dims, *this);
}

int64_t Shape::dim(int i) const {
  int a = i < 0 ? i + ndim_ : i;
  TIDE_CHECK(a >= 0 && a < ndim_, "shape", "dim ", i, " out of range for ", str());
  return d_[a];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= d_[i];
  return n;
}

void Shape::push_back(int64_t v) {
  TIDE_CHECK(ndim_ < kMaxDims, "shape", "at most ", kMaxDims, " dims");
  TIDE_CHECK(v >= 0, "shape", "negative extent ", v);
  d_[ndim_++] = v;
  try {
    check_numel(std::span<const int64_t>(d_.data(), size_t(ndim_)), *this);
  } catch (...) {
    --ndim_;  // unchanged on failure
    throw;
  }
}

std::array<int64_t, kMaxDims> Shape::strides() const {
  std::array<int64_t, kMaxDims> s{};
  int64_t acc = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= d_[i];
  }
  return s;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[i]);
  }
  if (ndim_ == 1) s += ",";
  return s + ")";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.ndim_ != b.ndim_) return false;
  for (int i = 0; i < a.ndim_; ++i)
    if (a.d_[i] != b.d_[i]) return false;
  return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    TIDE_CHECK(da == db || da == 1 || db == 1, op, "shapes ", a.str(), " and ", b.str(),
               " cannot broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

int normalize_axis(int axis, int ndim, const char* op) {
  int a = axis < 0 ? axis + ndim : axis;
  TIDE_CHECK(a >= 0 && a < ndim, op, "axis ", axis, " out of range for a rank-", ndim, " tensor");
  return a;
}

}  // namespace tide
