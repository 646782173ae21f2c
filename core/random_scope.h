// Where an eager random op takes its Philox counters: from its generator (reserved at the
// call), or, inside a RandomScope on the calling thread, from the scope's sub-stream of that
// generator. trace::loop with a tensor count runs its eager body inside a RandomScope so the
// body draws what the traced loop node draws (trace/loop.cpp has the rule). Outside a scope
// this costs random ops one thread-local load.
#pragma once

#include <cstdint>

#include "core/rng.h"

namespace tide {

// A Philox (offset, key) pair: a random op's element i uses block offset + i/4 under key.
struct PhiloxCounter {
  uint64_t offset = 0;
  uint64_t key = 0;
};

// The counters of a random op of `numel` elements drawing from `gen` on this thread
// (outside a trace): inside a RandomTape (core/random_tape.h) as it says, else from the
// innermost RandomScope when there is one, else {gen.reserve(numel), gen.seed()}. Throws "[loop]"
// when a scope already bound to another generator is asked (see RandomScope).
PhiloxCounter reserve_random(Generator& gen, uint64_t numel);

namespace detail {

// The error of a body whose sub-stream would need two generators.
inline constexpr const char* kSubstreamTwoGenerators =
    "random ops inside one trace::loop body with a tensor count must draw from one "
    "generator: the body draws its numbers from one sub-stream of it";

// A sub-stream installed on the calling thread for the scope's lifetime (RAII; scopes nest).
// It binds to the generator of the first random op of more than zero elements drawn inside
// it: that draw first reserves ONE Philox block (counter c, key k) from the enclosing
// stream (the parent scope, or the generator itself), in the order the draws happen, and
// the sub-stream's key becomes substream_key(k, c) (core/rng.h). From then on draws take
// consecutive blocks from offset 0 under that key. A draw of another generator throws
// "[loop]"; draws of zero elements take nothing and bind nothing.
class RandomScope {
 public:
  RandomScope();
  ~RandomScope();
  RandomScope(const RandomScope&) = delete;
  RandomScope& operator=(const RandomScope&) = delete;

  PhiloxCounter draw(Generator& gen, uint64_t numel);
  // The bound generator, or nullptr before the first draw.
  Generator* generator() const { return gen_; }

 private:
  RandomScope* parent_;
  Generator* gen_ = nullptr;
  uint64_t key_ = 0;
  uint64_t cursor_ = 0;  // next block of the sub-stream
};

}  // namespace detail
}  // namespace tide
