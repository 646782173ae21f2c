// The CPU executor: a replay is queued as one engine task that binds the call's inputs and
// fresh outputs to the graph's slots, refreshes the random counters and runs the planned
// program (in order, or with independent branches at once: trace/cpu/parallel.h). Errors
// inside it surface at the next sync on its outputs (or on what it wrote), named after
// the failing node, like eager errors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/source_location.h"
#include "core/tensor.h"
#include "trace/graph.h"
#include "trace/replay.h"

namespace tide::trace {

// Queues one replay of g with `args` bound to g.inputs (same shapes and dtypes as traced;
// contiguous). Returns the outputs: fresh tensors for values the graph computes, the same
// tensors for arguments, captures or state returned as they are. Adds the bytes it
// allocated (outputs only) to *allocated. Does not wait.
std::vector<Tensor> replay_program(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                                   tide::SourceLocation site, size_t* allocated = nullptr);

enum class Order {
  planned,  // g.streams > 1: independent branches at once (trace/cpu/parallel.h)
  program,  // one node after the other, in recording order
};

// Runs g's program here, now (a worker, or a caller that waited). Returns the bytes its
// kernels allocated while they ran (workspaces: what the plan did not foresee), on every
// thread that ran nodes. Rethrows a node's error as node_failure() words it. `after_node`,
// when set, is called with each node's index once it ran (verify); it implies
// Order::program.
uint64_t run_program(const Graph& g, Order order = Order::planned,
                     const std::function<void(size_t)>& after_node = {});

}  // namespace tide::trace
