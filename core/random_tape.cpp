#include "core/random_tape.h"

#include "core/error.h"

namespace tide::detail {

namespace {
thread_local RandomTape* tl_tape = nullptr;

const char* kind(const void* sink) { return sink ? "traced" : "eager"; }
}  // namespace

RandomTape::RandomTape(std::vector<RandomDraw>& draws, Mode mode, const char* what)
    : draws_(draws), mode_(mode), what_(what), parent_(tl_tape) {
  tl_tape = this;
}

RandomTape::~RandomTape() { tl_tape = parent_; }

RandomTape* RandomTape::current() { return tl_tape; }

const RandomDraw& RandomTape::next(const Generator& gen, uint64_t numel, const void* sink) {
  static constexpr const char* kRule =
      "; a recomputed function must draw the same random numbers as its first run (the same "
      "random ops, generators and sizes, its modules in the same train/eval mode, its forward "
      "and backward in the same traced call or both outside a trace)";
  TIDE_CHECK(cursor_ < draws_.size(), what_, "the recompute made random draw #", cursor_ + 1, " (",
             numel, " elements) but the first run made ", draws_.size(), kRule);
  const RandomDraw& d = draws_[cursor_];
  TIDE_CHECK(d.gen == &gen && d.numel == numel && d.sink == sink, what_, "random draw #",
             cursor_ + 1, " of the recompute (", kind(sink), ", ", numel, " elements",
             d.gen == &gen ? "" : ", another generator", ") differs from the first run's (",
             kind(d.sink), ", ", d.numel, " elements)",
             d.sink && sink && d.sink != sink ? " recorded by another trace" : "", kRule);
  ++cursor_;
  return d;
}

PhiloxCounter RandomTape::eager(Generator& gen, uint64_t numel,
                                const std::function<PhiloxCounter()>& fresh) {
  if (mode_ == Mode::replay) return next(gen, numel, nullptr).eager;
  PhiloxCounter r = parent_ ? parent_->eager(gen, numel, fresh) : fresh();
  draws_.push_back({&gen, numel, r, nullptr, nullptr});
  return r;
}

const uint64_t* RandomTape::traced(Generator& gen, uint64_t numel, const void* sink,
                                   const std::function<const uint64_t*()>& fresh) {
  if (mode_ == Mode::replay) return next(gen, numel, sink).slot;
  const uint64_t* slot = parent_ ? parent_->traced(gen, numel, sink, fresh) : fresh();
  draws_.push_back({&gen, numel, {}, slot, sink});
  return slot;
}

void RandomTape::check_spent() const {
  if (mode_ != Mode::replay) return;
  TIDE_CHECK(cursor_ == draws_.size(), what_, "the recompute made ", cursor_,
             " random draws but the first run made ", draws_.size(),
             "; a recomputed function must draw the same random numbers as its first run (its "
             "modules in the same train/eval mode)");
}

}  // namespace tide::detail
