#include "core/rng.h"

#include "core/error.h"
#include "core/random_scope.h"
#include "core/random_tape.h"

namespace tide {

Generator& default_generator() {
  static Generator g(0x7469646573656564ull);  // "tideseed"
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace detail {
namespace {
thread_local RandomScope* tl_random_scope = nullptr;
}  // namespace

RandomScope::RandomScope() : parent_(tl_random_scope) { tl_random_scope = this; }
RandomScope::~RandomScope() { tl_random_scope = parent_; }

PhiloxCounter RandomScope::draw(Generator& gen, uint64_t numel) {
  uint64_t blocks = (numel + 3) / 4;
  if (blocks == 0) return {cursor_, key_};
  if (!gen_) {
    // The sub-stream's one block, from the enclosing stream, at the first draw: nothing
    // else can draw from `gen` between the scope's start and here without coming through
    // this scope, so this is the order a reservation at the start would have.
    PhiloxCounter b = parent_ ? parent_->draw(gen, 4) : PhiloxCounter{gen.reserve(4), gen.seed()};
    gen_ = &gen;
    key_ = substream_key(b.key, b.offset);
    cursor_ = 0;
  }
  TIDE_CHECK(gen_ == &gen, "loop", kSubstreamTwoGenerators, " (this body drew from two)");
  PhiloxCounter r{cursor_, key_};
  cursor_ += blocks;
  return r;
}

}  // namespace detail

PhiloxCounter reserve_random(Generator& gen, uint64_t numel) {
  auto untaped = [&]() -> PhiloxCounter {
    if (detail::RandomScope* s = detail::tl_random_scope) return s->draw(gen, numel);
    return {gen.reserve(numel), gen.seed()};
  };
  // A checkpoint's first run records what it drew and its recompute draws it again.
  if (detail::RandomTape* t = detail::RandomTape::current()) [[unlikely]]
    return t->eager(gen, numel, untaped);
  return untaped();
}

}  // namespace tide
