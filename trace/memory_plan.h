// A traced function's memory, known before any replay runs: what its graph holds and what
// each replay takes, by role, each counted at the allocator's block size (the arena is one
// block). Read from the planned graph (trace/planner.h); nothing here allocates or waits.
// Not counted: what kernels take while they run (workspaces), and on a GPU the CUDA graph's
// fixed copies of its inputs and outputs and its workspace (FunctionStats::graph_bytes).
#pragma once

#include <cstddef>
#include <string>

namespace tide::trace {

struct Graph;

struct MemoryPlan {
  // Held before and after every replay.
  size_t parameters = 0;  // captured tensors that are leaves with a gradient bound
  size_t captured = 0;    // other captured tensors: optimizer state, buffers, schedules
  size_t state = 0;       // made by the function and kept (gradients it takes, new state)
  size_t constants = 0;   // made from host data while tracing
  size_t arena = 0;       // the planned intermediates (activations and temporaries), one block
  // Per replay: the arguments (the caller's tensors) and the fresh outputs.
  size_t inputs = 0;
  size_t outputs = 0;
  // The intermediates without sharing, each at its block size: what the same step run
  // eagerly holds when it is queued whole before its ops run (outputs allocated at enqueue,
  // freed only as the worker catches up).
  size_t unshared = 0;
  // Of those, the ones still needed once every output has been computed (all but the
  // intermediates whose last use comes before the last output's first write).
  size_t unshared_after_outputs = 0;
  // Run eagerly, a step makes anew on every call what the trace keeps (its state: the
  // gradients, since zero_grad drops them; its constants) and is given new arguments:
  // of all it makes or is given, each counted from its first use (arguments: from the
  // step's start) to its last,
  //   step_after_outputs: what is still needed once every output has been computed, e.g.
  //     a training step's backward and update after its loss, with the batch and the
  //     gradients they use;
  //   step_live_peak: the most alive at once, at any one op.
  size_t step_after_outputs = 0;
  size_t step_live_peak = 0;
  // The sum: what a replay needs at its peak, the captured tensors included.
  size_t peak() const {
    return parameters + captured + state + constants + arena + inputs + outputs;
  }
  // What one eager step makes or is given, unshared: intermediates, state, constants,
  // arguments and outputs.
  size_t eager_step() const { return unshared + state + constants + inputs + outputs; }
  // The same step run eagerly with `in_flight` steps queued ahead of the worker and
  // outputs allocated at enqueue: the captured tensors plus each queued step whole. An
  // upper bound: the worker frees what it has finished meanwhile.
  size_t eager_peak(int in_flight) const {
    return parameters + captured + size_t(in_flight) * eager_step();
  }
  // The same when a sync point reads each step's outputs `lag` steps after queueing it
  // (per_batch: 0; bounded:K with a read K steps behind: K), so that the next step is
  // queued while the read step's remainder (step_after_outputs) may not have run: lag + 1
  // whole steps and one remainder.
  size_t eager_peak_reading(int lag) const { return eager_peak(lag + 1) + step_after_outputs; }
  // The same when the engine bounds the queued ops to `steps` steps' worth
  // (Engine::set_max_inflight_ops, as train::Trainer's bounded:K) and the frontend keeps
  // the queue full: the queue is a window of `steps` steps' ops, whose oldest step holds
  // what its queued ops need and whose newest what its queued ops made (the frontend has
  // allocated the output of the op it waits to queue, too): together one whole step plus
  // what is alive at the op between them, so `steps` whole steps and the live peak.
  size_t eager_peak_bounded(int steps) const { return eager_peak(steps) + step_live_peak; }
  // The same step run eagerly with outputs allocated at execution (or synchronously):
  // queued ops hold nothing, and the running step what is alive at its op.
  size_t eager_peak_running() const { return parameters + captured + step_live_peak; }
  // One line per role, with MB of 2^20 bytes.
  std::string str() const;
};

// The plan of a planned graph (after trace/planner.h's plan()).
MemoryPlan memory_plan(const Graph& g);

// bytes in MB of 2^20 with one decimal ("40.4"), as the plans and reports print them.
std::string mb_text(size_t bytes);

}  // namespace tide::trace
