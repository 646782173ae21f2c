// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. Element i of a random op draws from counter (offset + i/4),
// lane i%4, so the numbers depend only on (seed, offset, i): not on thread count, chunking,
// execution order or device. Header-only and usable from CUDA kernels.
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

// The 4x32 block for a 64-bit counter under a 64-bit key.
TIDE_HOST_DEVICE U32x4 block(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 bits (float) or 32 bits (double) of randomness.
TIDE_HOST_DEVICE double to_unit(uint32_t x) { return double(x) * (1.0 / 4294967296.0); }

// Element i of rand(): uniform in [0, 1).
template <class T>
TIDE_HOST_DEVICE T uniform_at(uint64_t offset, uint64_t key, uint64_t i) {
  U32x4 b = block(offset + i / 4, key);
  uint32_t x = b.v[i % 4];
  if constexpr (sizeof(T) == 4) return T(x >> 8) * T(1.0 / 16777216.0);
  return T(to_unit(x));
}

// Box-Muller on one pair of lanes: out[0] = r cos(th), out[1] = r sin(th).
template <class T>
TIDE_HOST_DEVICE void box_muller(uint32_t x1, uint32_t x2, T* out) {
  double u1 = (double(x1) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]: log is finite
  double r = std::sqrt(-2.0 * std::log(u1));
  double th = 6.283185307179586476925 * to_unit(x2);
  out[0] = T(r * std::cos(th));
  out[1] = T(r * std::sin(th));
}

// Element i of randn(): standard normal by Box-Muller on lanes (0,1) and (2,3).
template <class T>
TIDE_HOST_DEVICE T normal_at(uint64_t offset, uint64_t key, uint64_t i) {
  U32x4 b = block(offset + i / 4, key);
  int lane = int(i % 4), pair = lane & 2;
  T z[2];
  box_muller(b.v[pair], b.v[pair + 1], z);
  return z[lane & 1];
}

// Elements 4*blk .. 4*blk+3 at once (one Philox block): what the CPU kernels use.
template <class T>
TIDE_HOST_DEVICE void normal4(uint64_t offset, uint64_t key, uint64_t blk, T* out) {
  U32x4 b = block(offset + blk, key);
  box_muller(b.v[0], b.v[1], out);
  box_muller(b.v[2], b.v[3], out + 2);
}
template <class T>
TIDE_HOST_DEVICE void uniform4(uint64_t offset, uint64_t key, uint64_t blk, T* out) {
  U32x4 b = block(offset + blk, key);
  for (int l = 0; l < 4; ++l) {
    if constexpr (sizeof(T) == 4) out[l] = T(b.v[l] >> 8) * T(1.0 / 16777216.0);
    else out[l] = T(to_unit(b.v[l]));
  }
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
