// Generators for random ops. A Generator is a (seed, offset) pair; each random op reserves
// a range of Philox counters at the call (on the frontend), so the numbers it produces are
// fixed when it is queued, whatever runs first.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/philox.h"

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

// splitmix64 and the sub-stream key (trace::loop with a tensor count): core/philox.h, where
// the GPU's loop kernels share them.
using philox::splitmix64;
using philox::substream_key;

// The generator random ops use when none is given.
Generator& default_generator();
// Seeds the default generator (offset back to 0).
void manual_seed(uint64_t seed);

}  // namespace tide
