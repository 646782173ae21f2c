// bfloat16 and float16: tide's 16-bit floating storage types. Each holds the
// IEEE-style bits in a uint16_t and converts to and from float; there is no arithmetic on
// them on purpose: kernels load them as float, compute in float and store them back.
// Compiled by g++, nvcc and NVRTC (TIDE_HOST_DEVICE; the compiled chains include it).
//
// The conversions are written as bit manipulation instead of using the compiler's _Float16 /
// __bf16 or CUDA's __nv_bfloat16 / __half intrinsics, so that every compiler and every device
// gives the same bits: _Float16 and __bf16 exist only on some GCC/Clang targets, and CUDA's
// intrinsics turn every NaN into one canonical NaN, which the CPU would then have to copy.
//
// float -> 16 bits rounds to nearest, ties to even; values past the largest finite round to
// +-inf (as IEEE); float16 keeps subnormals (no flush to zero). A NaN stays NaN: it keeps its
// sign and the top bits of its payload, and when those are all zero the quiet bit is set (a
// payload only in the dropped low bits would otherwise read as inf). So 16 -> 32 -> 16 gives
// back the same bits for all 65536 patterns, NaNs included. 16 bits -> float is exact.
#pragma once

#include <cstdint>
#include <type_traits>
#if !defined(__CUDACC_RTC__)  // NVRTC (compiled chains, ops/chain_compiler.cpp) has no <cstring>
#include <cstring>
#endif

#include "core/host_device.h"

namespace tide {

namespace detail {

TIDE_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
TIDE_HOST_DEVICE float float_of_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// bfloat16 is float's upper half: 8 exponent bits, 7 mantissa bits.
TIDE_HOST_DEVICE uint16_t bfloat16_bits_of(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN
    uint16_t h = uint16_t(u >> 16);
    return (h & 0x7fu) ? h : uint16_t(h | 0x40u);
  }
  // Adding 0x7fff (+1 when the kept part is odd) carries into bit 16 exactly when the dropped
  // half is above one half ulp, or equal to it with an odd kept part; a carry out of the
  // largest finite reaches the inf pattern.
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
TIDE_HOST_DEVICE float float_of_bfloat16_bits(uint16_t h) {
  return float_of_bits(uint32_t(h) << 16);
}

// float16 (IEEE binary16): 5 exponent bits (bias 15), 10 mantissa bits, subnormals down to
// 2^-24, largest finite 65504.
TIDE_HOST_DEVICE uint16_t float16_bits_of(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN
    const uint16_t payload = uint16_t((a >> 13) & 0x3ffu);
    return uint16_t(sign | 0x7c00u | (payload ? payload : 0x200u));
  }
  // 65520 = 65504 + half an ulp: the tie rounds to the even side, 2^16, which is inf.
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // >= 2^-14: a normal float16
    // Rebias the exponent (127 -> 15), then round the 13 dropped mantissa bits as above.
    uint32_t m = a - 0x38000000u;
    m += 0xfffu + ((m >> 13) & 1u);
    return uint16_t(sign | (m >> 13));
  }
  // Below 2^-14: a multiple of 2^-24 (a subnormal), or zero. At most 2^-25 rounds to zero
  // (2^-25 itself is a tie with an even zero).
  if (a <= 0x33000000u) return sign;
  const uint32_t e = a >> 23;                         // 102 .. 112
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // value = mant * 2^(e - 150)
  const uint32_t shift = 126u - e;                    // value / 2^-24 = mant >> shift
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q = 0x400 is the smallest normal
  return uint16_t(sign | q);
}
TIDE_HOST_DEVICE float float_of_float16_bits(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return float_of_bits(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0) {
    if (m == 0) return float_of_bits(sign);
    // Subnormal: normalise (every float16 subnormal is a normal float).
    e = 1;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
  }
  return float_of_bits(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail

// The 16-bit storage types. Trivial (an uninitialised bfloat16 holds garbage, as a float
// does; bfloat16{} is +0), with explicit conversions only, so no float arithmetic on them
// compiles by accident.
struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  TIDE_HOST_DEVICE explicit bfloat16(float f) : bits(detail::bfloat16_bits_of(f)) {}
  TIDE_HOST_DEVICE explicit operator float() const { return detail::float_of_bfloat16_bits(bits); }
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 x{};
    x.bits = b;
    return x;
  }
};
struct float16 {
  uint16_t bits;
  float16() = default;
  TIDE_HOST_DEVICE explicit float16(float f) : bits(detail::float16_bits_of(f)) {}
  TIDE_HOST_DEVICE explicit operator float() const { return detail::float_of_float16_bits(bits); }
  static constexpr float16 from_bits(uint16_t b) {
    float16 x{};
    x.bits = b;
    return x;
  }
};
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// The type kernels compute a T in: float for the 16-bit storage types, T itself otherwise
// (DESIGN.md, Mixed precision: load in 16 bits, compute in float32, store in 16 bits).
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;
// a in its compute type: a no-op but for the 16-bit types, which it converts exactly.
template <class T>
TIDE_HOST_DEVICE compute_t<T> widen(T a) {
  return compute_t<T>(a);
}

// `a` as a To, where one side may be a 16-bit type: through float (so double -> bfloat16
// rounds twice, as PyTorch's conversion does). Between other types, C++'s conversion.
template <class To, class From>
TIDE_HOST_DEVICE To half_convert(From a) {
  if constexpr (std::is_same_v<To, From>) return a;
  else if constexpr (is_half_v<From>) return half_convert<To>(float(a));
  else if constexpr (is_half_v<To>) return To(float(a));
  else return To(a);
}

}  // namespace tide
