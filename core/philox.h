// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. Element i of a random op draws from counter (offset + i/4),
// lane i%4, so the numbers depend only on (seed, offset, i): not on thread count, chunking,
// execution order or device. Header-only and usable from CUDA kernels.
//
// The normal transform (Box-Muller) uses no libm: its log, sin and cos are polynomials
// below, evaluated with IEEE +, -, *, / and sqrt only (each correctly rounded on the CPU
// and on CUDA without FMA contraction: the CPU kernel file is compiled with
// -ffp-contract=off, CUDA with --fmad=false). So every device computes the same bits, and
// the CPU loop vectorises over Philox blocks (ops/cpu/creation.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace tide::philox {

struct U32x4 {
  uint32_t v[4];
};

TIDE_HOST_DEVICE void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// One of the ten rounds, on a counter (c0..c3) under round key (k0, k1).
TIDE_HOST_DEVICE void one_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0,
                                uint32_t k1) {
  uint32_t hi0, lo0, hi1, lo1;
  mulhilo(0xD2511F53u, c0, hi0, lo0);
  mulhilo(0xCD9E8D57u, c2, hi1, lo1);
  uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
  c0 = n0, c1 = n1, c2 = n2, c3 = n3;
}

// The 4x32 block for a 64-bit counter under a 64-bit key.
TIDE_HOST_DEVICE U32x4 block(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    one_round(c0, c1, c2, c3, k0, k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// L consecutive blocks (counters first .. first+L-1) at once, lane l in c[.][l]: the same
// words as block(), with the rounds outside the lane loop so that a compiler vectorises it.
template <int L>
TIDE_HOST_DEVICE void blocks(uint64_t first, uint64_t key, uint32_t (&c)[4][L]) {
  for (int l = 0; l < L; ++l) {
    c[0][l] = uint32_t(first + uint64_t(l));
    c[1][l] = uint32_t((first + uint64_t(l)) >> 32);
    c[2][l] = 0;
    c[3][l] = 0;
  }
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    for (int l = 0; l < L; ++l) one_round(c[0][l], c[1][l], c[2][l], c[3][l], k0, k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// Uniform in [0, 1) with 24 bits (float) or 32 bits (double) of randomness.
TIDE_HOST_DEVICE double to_unit(uint32_t x) { return double(x) * (1.0 / 4294967296.0); }

template <class T>
TIDE_HOST_DEVICE T uniform_of(uint32_t x) {
  if constexpr (sizeof(T) == 4) return T(x >> 8) * T(1.0 / 16777216.0);
  else return T(to_unit(x));
}

// Element i of rand(): uniform in [0, 1).
template <class T>
TIDE_HOST_DEVICE T uniform_at(uint64_t offset, uint64_t key, uint64_t i) {
  U32x4 b = block(offset + i / 4, key);
  return uniform_of<T>(b.v[i % 4]);
}

// ---- the normal transform, without libm -------------------------------------------------

TIDE_HOST_DEVICE uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(uint32_t, x);
#endif
}
TIDE_HOST_DEVICE float float_of(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  return __builtin_bit_cast(float, x);
#endif
}
TIDE_HOST_DEVICE uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return uint64_t(__double_as_longlong(x));
#else
  return __builtin_bit_cast(uint64_t, x);
#endif
}
TIDE_HOST_DEVICE double double_of(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double((long long)x);
#else
  return __builtin_bit_cast(double, x);
#endif
}

// log(u) for u = (x + 1/2) / 2^32, in (0, 1). u = 2^k m with m in [sqrt(1/2), sqrt(2)) and
// log(m) = log((1 + s) / (1 - s)) for s = f / (2 + f), f = m - 1: the reduction and the
// odd polynomial in s of FreeBSD's logf/log (fdlibm). Relative error: a few ulps.
TIDE_HOST_DEVICE float log_unit_f32(uint32_t x) {
  const float u = float(x) * 0x1p-32f + 0x1p-33f;  // rounded: only k and, for k != 0, m
  uint32_t ix = bits_of(u) + (0x3f800000u - 0x3f3504f3u);
  const int k = int(ix >> 23) - 0x7f;
  const float m = float_of((ix & 0x007fffffu) + 0x3f3504f3u);
  // For k == 0 (u >= sqrt(1/2)), f = u - 1 from the integer: the rounded u would lose
  // the low bits of 1 - u, all there is of log(u) near 1.
  const float f = k == 0 ? -(float(~x) * 0x1p-32f + 0x1p-33f) : m - 1.0f;
  const float s = f / (2.0f + f), z = s * s, w = z * z;
  const float t1 = w * (0xccce13.0p-25f + w * 0xf89e26.0p-26f);
  const float t2 = z * (0xaaaaaa.0p-24f + w * 0x91e9ee.0p-25f);
  const float r = t2 + t1, hfsq = 0.5f * f * f, dk = float(k);
  return dk * 6.9313812256e-01f - ((hfsq - (s * (hfsq + r) + dk * 9.0580006145e-06f)) - f);
}
TIDE_HOST_DEVICE double log_unit_f64(uint32_t x) {
  const double u = (double(x) + 0.5) * 0x1p-32;  // exact
  uint64_t ix = bits_of(u) + (0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull);
  const int k = int(ix >> 52) - 0x3ff;
  const double f = double_of((ix & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull) - 1.0;
  const double s = f / (2.0 + f), z = s * s, w = z * z;
  const double t1 = w * (3.999999999940941908e-01 +
                         w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
  const double t2 = z * (6.666666666666735130e-01 +
                         w * (2.857142874366239149e-01 +
                              w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  const double r = t2 + t1, hfsq = 0.5 * f * f, dk = double(k);
  return dk * 6.93147180369123816490e-01 -
         ((hfsq - (s * (hfsq + r) + dk * 1.90821492927058770002e-10)) - f);
}

// sin and cos of a in [-pi/4, pi/4]: Cephes' sinf/cosf polynomials (float), fdlibm's
// __kernel_sin/__kernel_cos (double).
TIDE_HOST_DEVICE void sincos_small(float a, float& s, float& c) {
  const float z = a * a;
  s = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * a + a;
  c = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
      0.5f * z + 1.0f;
}
TIDE_HOST_DEVICE void sincos_small(double a, double& s, double& c) {
  const double z = a * a;
  const double rs = 8.33333333332248946124e-03 +
                    z * (-1.98412698298579493134e-04 +
                         z * (2.75573137070700676789e-06 +
                              z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)));
  s = a + z * a * (-1.66666666666666324348e-01 + z * rs);
  const double rc =
      z * (4.16666666666666019037e-02 +
           z * (-1.38888888888741095749e-03 +
                z * (2.48015872894767294178e-05 +
                     z * (-2.75573143513906633035e-07 +
                          z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
  const double hz = 0.5 * z, w = 1.0 - hz;
  c = w + (((1.0 - w) - hz) + z * rc);
}

// Box-Muller on one pair of words: with u = (x1 + 1/2) / 2^32 and th = 2 pi x2 / 2^32,
// z0 = sqrt(-2 log u) cos(th), z1 = sqrt(-2 log u) sin(th). th is reduced exactly in the
// integer: the quadrant q = round(x2 / 2^30) and a = th - q pi/2 in [-pi/4, pi/4).
template <class T>
TIDE_HOST_DEVICE void box_muller(uint32_t x1, uint32_t x2, T& z0, T& z1) {
  T lg;
  if constexpr (sizeof(T) == 4) lg = log_unit_f32(x1);
  else lg = log_unit_f64(x1);
  const T r = std::sqrt(T(-2) * lg);
  const uint32_t q = (x2 + 0x20000000u) >> 30;
  const T a = T(int32_t(x2 - (q << 30))) * T(6.283185307179586476925 / 4294967296.0);
  T s, c;
  sincos_small(a, s, c);
  // Rotate (c, s) by q quarter turns.
  const T cq = q & 1 ? -s : c, sq = q & 1 ? c : s;
  z0 = r * (q & 2 ? -cq : cq);
  z1 = r * (q & 2 ? -sq : sq);
}

// Element i of randn(): standard normal by Box-Muller on lanes (0,1) and (2,3).
template <class T>
TIDE_HOST_DEVICE T normal_at(uint64_t offset, uint64_t key, uint64_t i) {
  U32x4 b = block(offset + i / 4, key);
  int lane = int(i % 4), pair = lane & 2;
  T z0, z1;
  box_muller(b.v[pair], b.v[pair + 1], z0, z1);
  return lane & 1 ? z1 : z0;
}

// Elements 4*blk .. 4*blk+3 at once (one Philox block).
template <class T>
TIDE_HOST_DEVICE void normal4(uint64_t offset, uint64_t key, uint64_t blk, T* out) {
  U32x4 b = block(offset + blk, key);
  box_muller(b.v[0], b.v[1], out[0], out[1]);
  box_muller(b.v[2], b.v[3], out[2], out[3]);
}
template <class T>
TIDE_HOST_DEVICE void uniform4(uint64_t offset, uint64_t key, uint64_t blk, T* out) {
  U32x4 b = block(offset + blk, key);
  for (int l = 0; l < 4; ++l) out[l] = uniform_of<T>(b.v[l]);
}

// splitmix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA'14; the finalizer of Java's SplittableRandom): a bijection of 64-bit
// words in which every input bit flips each output bit with probability close to 1/2.
TIDE_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The Philox key of a sub-stream (trace::loop with a tensor count draws its body's numbers
// from one): splitmix64(splitmix64(key) ^ counter), where (counter, key) is the block the
// sub-stream reserved from its parent stream. Both steps are bijections, so under one key
// different blocks give different sub-keys; a sub-key meets its parent's key, or another
// seed's key, only by a 64-bit coincidence.
TIDE_HOST_DEVICE constexpr uint64_t substream_key(uint64_t key, uint64_t counter) {
  return splitmix64(splitmix64(key) ^ counter);
}

}  // namespace tide::philox
