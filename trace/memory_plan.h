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
  // The sum: what a replay needs at its peak, the captured tensors included.
  size_t peak() const {
    return parameters + captured + state + constants + arena + inputs + outputs;
  }
  // One line per role, with MB of 2^20 bytes.
  std::string str() const;
};

// The plan of a planned graph (after trace/planner.h's plan()).
MemoryPlan memory_plan(const Graph& g);

}  // namespace tide::trace
