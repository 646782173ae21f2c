// A tape of the Philox counters random ops take, so that a second run of the same ops draws
// the same numbers (checkpoint's recompute, ops/checkpoint.h). Recording, the tape notes in
// order what each draw on this thread got; replaying, it hands those back and touches no
// generator. It sits where counters come from: reserve_random on the eager path (a random
// op, a trace replay's counters, a trace::loop body's sub-stream) and a trace's counter
// slots while recording (CaptureSink::random_counter, trace/recorder.cpp), whose kernels
// then read one slot twice, so every replay draws the same numbers for both. Thread-local;
// tapes nest (an inner recording tape takes its draws through the outer one).
// Not here: draws on other threads than the one the tape was installed on.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/random_scope.h"

namespace tide::detail {

// One draw: the generator and size it asked for, and what it got.
struct RandomDraw {
  const Generator* gen = nullptr;  // compared, never dereferenced
  uint64_t numel = 0;
  PhiloxCounter eager;             // an eager draw's (offset, key)
  const uint64_t* slot = nullptr;  // a traced draw's (offset, key) slot; null when eager
  const void* sink = nullptr;      // the trace recording a traced draw (its CaptureSink)
};

class RandomTape {
 public:
  enum class Mode { record, replay };
  // Installs the tape on this thread over `draws` (RAII): record appends to it, replay reads
  // it from the start. `what` names the caller in errors ("checkpoint").
  RandomTape(std::vector<RandomDraw>& draws, Mode mode, const char* what);
  ~RandomTape();
  RandomTape(const RandomTape&) = delete;
  RandomTape& operator=(const RandomTape&) = delete;

  // The innermost tape of this thread, or nullptr.
  static RandomTape* current();

  // An eager draw of `numel` elements from gen. Recording: from the enclosing tape, else
  // from `fresh` (the RandomScope or the generator); replaying: the next draw on the tape.
  // Throws "[what]" in replay when the draw differs from the recorded one (another
  // generator or size, a traced draw where an eager one was recorded) or the tape is spent.
  PhiloxCounter eager(Generator& gen, uint64_t numel, const std::function<PhiloxCounter()>& fresh);
  // The same for a traced draw in the trace `sink` records: `fresh` makes a new counter slot
  // (the recorder's). Replay also throws when the draw was recorded by another trace (the
  // slot belongs to that trace's replays).
  const uint64_t* traced(Generator& gen, uint64_t numel, const void* sink,
                         const std::function<const uint64_t*()>& fresh);
  // Throws "[what]" in replay unless every recorded draw was replayed.
  void check_spent() const;

 private:
  const RandomDraw& next(const Generator& gen, uint64_t numel, const void* sink);

  std::vector<RandomDraw>& draws_;
  Mode mode_;
  const char* what_;
  size_t cursor_ = 0;
  RandomTape* parent_;
};

}  // namespace tide::detail
