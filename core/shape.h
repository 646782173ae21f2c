// Shape: up to kMaxDims extents stored inline (no heap allocation, so building an op's
// output shape costs nothing on the enqueue path), plus broadcasting rules.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace tide {

inline constexpr int kMaxDims = 8;
// The most elements a shape may hold: 2^60, so that its byte count (at most 8 bytes an
// element) and offsets into it fit in 64 bits without a check on every use.
inline constexpr int64_t kMaxNumel = int64_t(1) << 60;

class Shape {
 public:
  Shape() = default;
  // Throws tide::Error("[shape]") on a negative extent, more than kMaxDims dims, or more
  // than kMaxNumel elements (a product that would overflow is refused, never wrapped).
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  // Extent of dim i, negative i counting from the end. Throws on out of range.
  int64_t dim(int i) const;
  int64_t numel() const;
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + ndim_; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  void push_back(int64_t v);
  // Row-major strides in elements.
  std::array<int64_t, kMaxDims> strides() const;
  std::string str() const;  // "(2, 3)"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> d_{};
  int ndim_ = 0;
};
inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

// NumPy broadcasting of two shapes. Throws tide::Error("[op] shapes ... cannot broadcast").
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Normalises a possibly negative axis for a rank-ndim tensor; throws "[op] axis ... out of range".
int normalize_axis(int axis, int ndim, const char* op);

}  // namespace tide
