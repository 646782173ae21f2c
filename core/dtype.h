// DType: the element types tide knows, their sizes and names, and the C++ type mapping.
// bfloat16 and float16 are storage types (core/float16.h): kernels that compute load them
// as float32 and store them back, and only the ops listed in docs/api.md (Dtypes) accept them
// today; the others throw "[op] bfloat16 is not supported yet: cast to float32 first".
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "core/float16.h"

namespace tide {

enum class DType : uint8_t { float32, float64, int32, int64, bfloat16, float16 };
inline constexpr int kNumDTypes = 6;

constexpr size_t size_of(DType t) {
  switch (t) {
    case DType::float32: return 4;
    case DType::float64: return 8;
    case DType::int32: return 4;
    case DType::int64: return 8;
    case DType::bfloat16: return 2;
    case DType::float16: return 2;
  }
  return 0;
}
constexpr std::string_view name(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
  }
  return "?";
}
// The 16-bit storage types.
constexpr bool is_half(DType t) { return t == DType::bfloat16 || t == DType::float16; }
constexpr bool is_floating(DType t) {
  return t == DType::float32 || t == DType::float64 || is_half(t);
}
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
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bfloat16;
};
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::float16;
};
template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

namespace detail {
// Throws "[<op>] bfloat16 is not supported yet: cast to float32 first" (op "dtype" when
// none is named): a 16-bit dtype reached code that computes in its element type.
[[noreturn]] void throw_half_unsupported(DType t, const char* op = "dtype");
}  // namespace detail

// Calls f(T{}) with T the C++ type of `t`, for the types kernels compute in (float32,
// float64, int32, int64); throws for bfloat16 and float16 (detail::throw_half_unsupported):
// their kernels are never instantiated by accident. Front-ends refuse those dtypes first,
// with the op's name (ops/op_util.h, check_supported).
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::float32: return f(float{});
    case DType::float64: return f(double{});
    case DType::int32: return f(int32_t{});
    case DType::int64: return f(int64_t{});
    case DType::bfloat16:
    case DType::float16: break;
  }
  detail::throw_half_unsupported(t);
}
// Same for float32 and float64 only; integer types are the caller's error to check first
// (they get float's instantiation), the 16-bit types throw as in dispatch_dtype.
template <class F>
decltype(auto) dispatch_floating(DType t, F&& f) {
  if (is_half(t)) [[unlikely]]
    detail::throw_half_unsupported(t);
  if (t == DType::float64) return f(double{});
  return f(float{});
}
// Every dtype, the 16-bit storage types included: for code that only moves or converts
// elements (cast, fills, host reads, save/load), never for arithmetic in T.
template <class F>
decltype(auto) dispatch_storage(DType t, F&& f) {
  switch (t) {
    case DType::bfloat16: return f(bfloat16{});
    case DType::float16: return f(float16{});
    default: return dispatch_dtype(t, std::forward<F>(f));
  }
}
// Every dtype, for kernels that compute in compute_t<T> (core/float16.h): the 16-bit types
// are loaded with widen(), computed in float and stored back (the ops whose row says `half`).
template <class F>
decltype(auto) dispatch_with_half(DType t, F&& f) {
  return dispatch_storage(t, std::forward<F>(f));
}
// float32, float64 and the 16-bit types (the GEMMs, which take 16-bit operands directly);
// integer types are the caller's error to check first (they get float's instantiation).
template <class F>
decltype(auto) dispatch_floating_with_half(DType t, F&& f) {
  switch (t) {
    case DType::bfloat16: return f(bfloat16{});
    case DType::float16: return f(float16{});
    case DType::float64: return f(double{});
    default: return f(float{});
  }
}

}  // namespace tide
