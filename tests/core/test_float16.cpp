// core/float16.h: bfloat16 and float16 conversions against references written plainly in
// double arithmetic (decoding by the formula, rounding by floor and a tie test), on every
// 16-bit pattern, on the edge cases of rounding, and on random float32 values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float16.h"

namespace tide {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A binary format with `mant` stored mantissa bits and `exp` exponent bits.
struct Format {
  int mant, exp;
  int bias() const { return (1 << (exp - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  double max_finite() const {
    return std::ldexp(2.0 - std::ldexp(1.0, -mant), (1 << exp) - 2 - bias());
  }
};
constexpr Format kBf16{7, 8}, kF16{10, 5};

// The value of 16-bit pattern h, by the textbook formula.
double decode(uint16_t h, Format f) {
  const bool neg = h >> 15;
  const int e = (h >> f.mant) & ((1 << f.exp) - 1);
  const int m = h & ((1 << f.mant) - 1);
  double v;
  if (e == (1 << f.exp) - 1) v = m ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else if (e == 0) v = std::ldexp(double(m), f.emin() - f.mant);
  else v = std::ldexp(1.0 + std::ldexp(double(m), -f.mant), e - f.bias());
  return neg ? -v : v;
}

// x rounded to the format: to nearest, ties to the even multiple of the ulp; past the largest
// finite (after rounding with an unbounded exponent) to inf. x is a float, so every step
// here is exact in double.
double round_to(float xf, Format f) {
  const double x = xf;
  if (x == 0 || std::isinf(x)) return x;
  int k;
  std::frexp(std::fabs(x), &k);  // |x| in [2^(k-1), 2^k)
  const int e = std::max(k - 1, f.emin());
  const double ulp = std::ldexp(1.0, e - f.mant);
  const double q = std::fabs(x) / ulp;
  double n = std::floor(q);
  const double r = q - n;
  if (r > 0.5 || (r == 0.5 && std::fmod(n, 2.0) == 1.0)) n += 1;
  double v = n * ulp;
  if (v > f.max_finite()) v = INFINITY;
  return std::copysign(v, x);
}

// The same value, sign of zero included.
bool same(double a, double b) { return a == b && std::signbit(a) == std::signbit(b); }

TEST(Float16, EveryPatternDecodesExactlyAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float b = float(bfloat16::from_bits(h)), f = float(float16::from_bits(h));
    const double rb = decode(h, kBf16), rf = decode(h, kF16);
    if (std::isnan(rb)) EXPECT_TRUE(std::isnan(b)) << std::hex << h;
    else EXPECT_TRUE(same(b, rb)) << std::hex << h << ": " << b << " vs " << rb;
    if (std::isnan(rf)) EXPECT_TRUE(std::isnan(f)) << std::hex << h;
    else EXPECT_TRUE(same(f, rf)) << std::hex << h << ": " << f << " vs " << rf;
    // 16 -> 32 -> 16 gives the same bits, NaNs (quiet and signalling) included.
    EXPECT_EQ(bfloat16(b).bits, h) << std::hex << h;
    EXPECT_EQ(float16(f).bits, h) << std::hex << h;
  }
}

// Checks float -> 16 bits of x against round_to, for both formats.
void expect_rounds(float x) {
  const double rb = round_to(x, kBf16), rf = round_to(x, kF16);
  EXPECT_TRUE(same(float(bfloat16(x)), rb)) << "bfloat16(" << x << " = 0x" << std::hex << bits(x)
                                            << ") = 0x" << bfloat16(x).bits << ", expected " << rb;
  EXPECT_TRUE(same(float(float16(x)), rf)) << "float16(" << x << " = 0x" << std::hex << bits(x)
                                           << ") = 0x" << float16(x).bits << ", expected " << rf;
}

TEST(Float16, RoundingEdgeCasesMatchTheReference) {
  const float cases[] = {
      0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY,
      // bfloat16 ties: 1 + 2^-8 (even: down), 1 + 3 * 2^-8 (odd: up), just above a tie.
      from_bits(0x3f808000), from_bits(0x3f818000), from_bits(0x3f808001), from_bits(0x3f807fff),
      // float16 ties around 1: 1 + 2^-11 (down), 1 + 3 * 2^-11 (up).
      1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f,
      // Largest finite and overflow: bfloat16's 0x7f7f, the tie above it, FLT_MAX.
      from_bits(0x7f7f0000), from_bits(0x7f7f7fff), from_bits(0x7f7f8000), from_bits(0x7f7fffff),
      -from_bits(0x7f7f8000),
      // float16: 65504 (largest), just below the tie, the tie 65520 (-> inf), above.
      65504.0f, 65519.996f, 65520.0f, 65536.0f, -65520.0f, 1e10f,
      // float16 subnormals: 2^-24 (smallest), 2^-25 (tie with zero), just above it, 3 * 2^-25
      // (tie between 1 and 2 ulps: up to 2), the largest subnormal, the tie at the boundary
      // 1023.5 * 2^-24 (up to the smallest normal 2^-14), the boundary itself.
      0x1p-24f, 0x1p-25f, from_bits(bits(0x1p-25f) + 1), 3 * 0x1p-25f, 1023 * 0x1p-24f,
      1023.5f * 0x1p-24f, 0x1p-14f, from_bits(bits(0x1p-14f) - 1), -0x1p-24f, -0x1p-26f,
      // float32 subnormals and bfloat16's: the smallest, a tie with zero, a tie up.
      from_bits(0x00000001), from_bits(0x00008000), from_bits(0x00018000), from_bits(0x00010000),
      from_bits(0x807fffff), from_bits(0x00800000),
      // Ordinary values.
      0.1f, -3.14159265f, 1e-3f, 1234.5678f, 6.1e-5f};
  for (float x : cases) expect_rounds(x);
  // A few exact expectations written out, so the reference itself is checked.
  EXPECT_EQ(bfloat16(from_bits(0x3f808000)).bits, 0x3f80);
  EXPECT_EQ(bfloat16(from_bits(0x3f818000)).bits, 0x3f82);
  EXPECT_EQ(bfloat16(from_bits(0x7f7f8000)).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(float16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(float16(65520.0f).bits, 0x7c00);
  EXPECT_EQ(float16(0x1p-24f).bits, 0x0001);
  EXPECT_EQ(float16(0x1p-25f).bits, 0x0000);
  EXPECT_EQ(float16(3 * 0x1p-25f).bits, 0x0002);
  EXPECT_EQ(float16(1023.5f * 0x1p-24f).bits, 0x0400);
  EXPECT_EQ(float16(-0.0f).bits, 0x8000);
}

TEST(Float16, NanStaysNanWithItsSignAndTopPayload) {
  struct Case {
    uint32_t f;
    uint16_t bf16, f16;
  };
  const Case cases[] = {
      {0x7fc00000, 0x7fc0, 0x7e00},  // the quiet NaN
      {0xffc00000, 0xffc0, 0xfe00},  // negative
      {0x7fc00001, 0x7fc0, 0x7e00},  // payload below both formats' bits
      {0x7f800001, 0x7fc0, 0x7e00},  // signalling, payload only in dropped bits: quiet bit set
      {0x7fa00000, 0x7fa0, 0x7d00},  // signalling with a kept payload: stays as it is
      {0x7fffe000, 0x7fff, 0x7fff},  // every kept payload bit set
      {0xff812345, 0xff81, 0xfc09},  // negative signalling, low payload bits kept
  };
  for (const Case& c : cases) {
    const float x = from_bits(c.f);
    ASSERT_TRUE(std::isnan(x));
    EXPECT_EQ(bfloat16(x).bits, c.bf16) << std::hex << c.f;
    EXPECT_EQ(float16(x).bits, c.f16) << std::hex << c.f;
  }
}

TEST(Float16, RandomFloatsMatchTheReference) {
  std::mt19937 gen(40);
  std::uniform_int_distribution<uint32_t> any;
  // Half the draws over every float32 pattern, half within float16's exponent range, where
  // its rounding (subnormals included) is exercised.
  std::uniform_real_distribution<float> exponent(-26.0f, 17.0f);
  int nans = 0;
  for (int i = 0; i < 400000; ++i) {
    float x;
    if (i % 2) {
      x = from_bits(any(gen));
    } else {
      x = std::exp2(exponent(gen)) * (any(gen) & 1 ? -1.0f : 1.0f);
      x = from_bits(bits(x) ^ (any(gen) & 0x1fff));  // random low bits: ties and near-ties
    }
    if (std::isnan(x)) {
      ++nans;
      EXPECT_TRUE(std::isnan(float(bfloat16(x))));
      EXPECT_TRUE(std::isnan(float(float16(x))));
      EXPECT_EQ(bfloat16(x).bits >> 15, bits(x) >> 31);
      continue;
    }
    expect_rounds(x);
    if (HasFailure()) break;  // one report is enough
  }
  EXPECT_GT(nans, 0);  // the sweep reached NaN patterns
}

TEST(Float16, DTypeTable) {
  static_assert(std::is_trivially_copyable_v<bfloat16> && std::is_trivially_copyable_v<float16>);
  static_assert(std::is_trivially_default_constructible_v<bfloat16>);
  EXPECT_EQ(size_of(DType::bfloat16), 2u);
  EXPECT_EQ(size_of(DType::float16), 2u);
  EXPECT_EQ(name(DType::bfloat16), "bfloat16");
  EXPECT_EQ(name(DType::float16), "float16");
  EXPECT_TRUE(is_floating(DType::bfloat16) && is_floating(DType::float16));
  EXPECT_TRUE(is_half(DType::bfloat16) && is_half(DType::float16));
  EXPECT_FALSE(is_half(DType::float32) || is_half(DType::int32));
  EXPECT_EQ(dtype_v<bfloat16>, DType::bfloat16);
  EXPECT_EQ(dtype_v<float16>, DType::float16);
  EXPECT_EQ(kNumDTypes, int(DType::float16) + 1);
}

TEST(Float16, DispatchKeepsKernelsOffTheStorageTypes) {
  // dispatch_storage reaches every type; dispatch_dtype and dispatch_floating refuse the
  // 16-bit ones instead of running a float kernel over 2-byte elements.
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = DType(i);
    EXPECT_EQ(dispatch_storage(t, [](auto z) { return dtype_v<decltype(z)>; }), t);
  }
  for (DType t : {DType::bfloat16, DType::float16}) {
    try {
      dispatch_dtype(t, [](auto) {});
      ADD_FAILURE() << "dispatch_dtype accepted " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(name(t)) + " is not supported yet"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(dispatch_floating(t, [](auto) {}), Error);
  }
}

}  // namespace
}  // namespace tide
