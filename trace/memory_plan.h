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
  // intermediates whose last use comes before the last output's first write): what an eager
  // step still holds when its result is read, e.g. a training step's backward and update
  // after its loss.
  size_t unshared_after_outputs = 0;
  // The sum: what a replay needs at its peak, the captured tensors included.
  size_t peak() const {
    return parameters + captured + state + constants + arena + inputs + outputs;
  }
  // What one eager step queued whole holds: its intermediates, arguments and outputs, and
  // the state it makes. That state is made afresh by every call (a training step's
  // gradients, which zero_grad() dropped: a traced replay rebinds them, an eager step
  // allocates new ones while the previous step's queued update still reads its own).
  size_t eager_step() const { return unshared + inputs + outputs + state; }
  // The same step run eagerly with `in_flight` steps queued ahead of the worker (1 under
  // per_batch, K under bounded:K) and outputs allocated at enqueue: what stays plus each
  // queued step. An upper bound: the worker frees what it has finished meanwhile.
  size_t eager_peak(int in_flight) const {
    return parameters + captured + constants + size_t(in_flight) * eager_step();
  }
  // The same when a sync point reads each step's outputs `lag` steps after queueing it
  // (per_batch: 0; bounded:K: K), so that the next step is queued while the read step's
  // remainder may not have run: lag + 1 whole steps, and the read step's intermediates
  // still needed after its outputs (unshared_after_outputs) with the state it made.
  size_t eager_peak_reading(int lag) const {
    return eager_peak(lag + 1) + unshared_after_outputs + state;
  }
  // The same when the engine bounds the queued ops to `k` steps' worth and nothing is read
  // meanwhile (train::Trainer's bounded:K): k whole steps, and what an earlier, mostly run
  // step still holds after its outputs.
  size_t eager_peak_op_bound(int k) const { return eager_peak(k) + unshared_after_outputs; }
  // One line per role, with MB of 2^20 bytes.
  std::string str() const;
};

// The plan of a planned graph (after trace/planner.h's plan()).
MemoryPlan memory_plan(const Graph& g);

// bytes in MB of 2^20 with one decimal ("40.4"), as the plans and reports print them.
std::string mb_text(size_t bytes);

}  // namespace tide::trace
