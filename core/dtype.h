// DType: the element types tide knows, their sizes and names, and the C++ type mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace tide {

enum class DType : uint8_t { float32, float64, int32, int64 };
inline constexpr int kNumDTypes = 4;

constexpr size_t size_of(DType t) {
  switch (t) {
    case DType::float32: return 4;
    case DType::float64: return 8;
    case DType::int32: return 4;
    case DType::int64: return 8;
  }
  return 0;
}
constexpr std::string_view name(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
  }
  return "?";
}
constexpr bool is_floating(DType t) { return t == DType::float32 || t == DType::float64; }
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << name(t); }

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::int32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::int64;
};
template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of `t`. For kernels written once per type.
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::float32: return f(float{});
    case DType::float64: return f(double{});
    case DType::int32: return f(int32_t{});
    case DType::int64: return f(int64_t{});
  }
  return f(float{});
}
// Same for the floating types only; other types are the caller's error to check first.
template <class F>
decltype(auto) dispatch_floating(DType t, F&& f) {
  if (t == DType::float64) return f(double{});
  return f(float{});
}

}  // namespace tide
