// The eager peak and the traced steady peak per sync policy and allocation setting, from the
// step's plan (train/eager_prediction.h).
#include "train/eager_prediction.h"

#include "core/error.h"

namespace tide::train {

PeakPrediction predict_eager_peak(const trace::MemoryPlan& plan, const Policy& policy,
                                  Allocation allocation, bool synchronous, int batches) {
  if (batches < 1)
    throw Error("predict_eager_peak", "batches must be >= 1, got " + std::to_string(batches));
  // Queued ops hold nothing: only the step that runs holds memory, whatever the policy.
  if (synchronous) return {plan.eager_peak_running(), {}};
  if (allocation == Allocation::at_execution) {
    if (policy.kind != SyncPolicy::bounded) return {plan.eager_peak_running(), {}};
    // Measured 0-10 % over: the frontend, waiting at the op bound, takes the engine's lock
    // often enough that the worker's reclaim before it takes a block misses it.
    return {0,
            "the frontend waits at the op bound while the worker runs, and what has run "
            "is given back only when the worker gets the engine's lock: one running "
            "step's " +
                trace::mb_text(plan.eager_peak_running()) +
                " MB plus what waits to be given back (timing)"};
  }
  switch (policy.kind) {
    // Trainer::run reads each loss right after queueing its step: the next step is queued
    // whole while the read one's backward and update may still wait.
    case SyncPolicy::per_batch: return {plan.eager_peak_reading(0), {}};
    // The engine's op bound admits K steps' ops (Trainer::run sizes it on the first step).
    case SyncPolicy::bounded: return {plan.eager_peak_bounded(policy.k), {}};
    case SyncPolicy::none: break;
  }
  return {0, "none queues as far as the frontend outruns the worker (timing); at most all " +
                 std::to_string(batches) +
                 " minibatches: " + trace::mb_text(plan.eager_peak(batches)) + " MB"};
}

PeakPrediction predict_traced_peak(const trace::MemoryPlan& plan, const Policy& policy,
                                   Allocation allocation, bool synchronous, int batches) {
  if (batches < 1)
    throw Error("predict_traced_peak", "batches must be >= 1, got " + std::to_string(batches));
  // A replay's intermediates are the arena, allocated once. What a queued replay adds is
  // its arguments (the batch) and its fresh outputs (the loss).
  const size_t per_replay = plan.inputs + plan.outputs;
  if (policy.kind == SyncPolicy::none && !synchronous)
    return {0, "none queues as far as the frontend outruns the worker (timing): the planned " +
                   trace::mb_text(plan.peak()) + " MB plus up to " + trace::mb_text(per_replay) +
                   " MB for each replay queued"};
  // per_batch reads each replay's loss, which a replay writes last: the next batch comes
  // once the previous replay has run. Allocated at execution, a queued replay holds nothing.
  if (synchronous || allocation == Allocation::at_execution || policy.kind == SyncPolicy::per_batch)
    return {plan.peak(), {}};
  // bounded:K: K replays queued at the op bound, and the next one's batch already made.
  return {plan.peak() + size_t(policy.k) * per_replay, {}};
}

}  // namespace tide::train
