// Generators for random ops. A Generator is a (seed, offset) pair; each random op reserves
// a range of Philox counters at the call (on the frontend), so the numbers it produces are
// fixed when it is queued, whatever runs first.
#pragma once

#include <atomic>
#include <cstdint>

namespace tide {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& o) : seed_(o.seed_), offset_(o.offset_.load()) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_.load(std::memory_order_relaxed); }
  // Resets to `seed` and offset 0.
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_.store(0);
  }
  void set_offset(uint64_t o) { offset_.store(o); }
  // Reserves the counters for `numel` elements; returns the first counter. Thread-safe.
  uint64_t reserve(uint64_t numel) { return offset_.fetch_add((numel + 3) / 4); }

 private:
  uint64_t seed_;
  std::atomic<uint64_t> offset_{0};
};

// splitmix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA'14; the finalizer of Java's SplittableRandom): a bijection of 64-bit
// words in which every input bit flips each output bit with probability close to 1/2.
constexpr uint64_t splitmix64(uint64_t x) {
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
constexpr uint64_t substream_key(uint64_t key, uint64_t counter) {
  return splitmix64(splitmix64(key) ^ counter);
}

// The generator random ops use when none is given.
Generator& default_generator();
// Seeds the default generator (offset back to 0).
void manual_seed(uint64_t seed);

}  // namespace tide
