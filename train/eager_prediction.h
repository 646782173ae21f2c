// An eager Trainer run's allocator peak, and a traced run's steady one, predicted before the
// run from its step's memory plan (Trainer::plan_step, trace/memory_plan.h) and the run's
// sync policy and allocation setting: docs/memory.md, "An eager step's memory, predicted
// from its trace".
#pragma once

#include <cstddef>
#include <string>

#include "core/engine/engine.h"
#include "trace/memory_plan.h"
#include "train/trainer.h"

namespace tide::train {

struct PeakPrediction {
  size_t bytes = 0;           // the allocator's predicted peak (active bytes), when predicted
  std::string not_predicted;  // otherwise why not (empty when predicted)
  bool predicted() const { return not_predicted.empty(); }
};

// The peak of `batches` eager minibatches under `policy`, the engine's allocation setting
// `allocation` (synchronous: whether the engine runs each op at once). The parameters and
// the optimizer's state count once (the plan's captured tensors), and nothing else the
// process holds. Not predicted (the reason says why, with a bound): `none` with outputs
// allocated at enqueue, whose peak is how far the frontend gets ahead of the worker, and
// bounded:K with outputs allocated at execution, whose peak is how much executed work
// waits to be reclaimed. Throws "[predict_eager_peak]" for batches < 1.
PeakPrediction predict_eager_peak(const trace::MemoryPlan& plan, const Policy& policy,
                                  Allocation allocation, bool synchronous, int batches);

// The same for a traced run's replays (TrainResult::steady_peak_active, the second half of
// the minibatches): the step's planned peak (MemoryPlan::peak: the captured tensors, the
// arena, one replay's arguments and outputs) for per_batch and for outputs allocated at
// execution; with outputs allocated at enqueue, bounded:K adds the arguments and outputs of
// K more replays (K queued at the op bound, the next one's batch made). Not predicted:
// `none` (timing; the reason gives the figures). Throws "[predict_traced_peak]" for
// batches < 1.
PeakPrediction predict_traced_peak(const trace::MemoryPlan& plan, const Policy& policy,
                                   Allocation allocation, bool synchronous, int batches);

}  // namespace tide::train
