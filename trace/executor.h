// The CPU executor: a replay is queued as one engine task that binds the call's inputs and
// fresh outputs to the graph's slots, refreshes the random counters and runs the planned
// program (in order, or with independent branches at once: trace/parallel.h). Errors
// inside it surface at the next sync on its outputs (or on what it wrote), named after
// the failing node, like eager errors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/source_location.h"
#include "core/tensor.h"
#include "trace/graph.h"

namespace tide::trace {

// Computes g.external_reads / external_writes. Call once after planning.
void prepare_replay(Graph& g);

// What one call binds: built on the frontend, applied by the task that runs the program.
struct CallBindings {
  struct InputBind {
    Storage* slot;
    // The argument, or null for one no node reads or writes: it is not declared to the
    // engine (nothing keeps it alive for the replay), so the replay never touches it.
    Storage* arg;
    size_t byte_offset;
  };
  struct OutputBind {
    Storage* slot;
    Storage* fresh;
  };
  std::vector<Tensor> result;  // what the call returns
  std::vector<InputBind> inputs;
  std::vector<OutputBind> outputs;      // computed outputs: the slot writes into fresh
  std::vector<OutputBind> copies;       // constant outputs: copied into fresh at the end
  std::vector<uint64_t> counters;       // per random op: offset, key
  std::vector<Storage*> reads, writes;  // what the call declares to the engine
  size_t allocated = 0;                 // bytes of fresh outputs
  bool in_order = false;                // arguments alias: no parallel branches

  void bind(Graph& g) const;  // inputs, outputs, random counters
  void finish() const;        // constant outputs
};

// Allocates the call's outputs and reserves its random counters (in eager order).
CallBindings prepare_call(Graph& g, std::span<const Tensor> args);

// Queues one replay of g with `args` bound to g.inputs (same shapes and dtypes as traced;
// contiguous). Returns the outputs: fresh tensors for values the graph computes, the same
// tensors for arguments, captures or state returned as they are. Adds the bytes it
// allocated (outputs only) to *allocated. Does not wait.
std::vector<Tensor> replay(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                           tide::SourceLocation site, size_t* allocated = nullptr);

enum class Order {
  planned,  // g.streams > 1: independent branches at once (trace/parallel.h)
  program,  // one node after the other, in recording order
};

// Runs g's program here, now (a worker, or a caller that waited). Returns the bytes its
// kernels allocated while they ran (workspaces: what the plan did not foresee), on every
// thread that ran nodes. Rethrows a node's error as node_failure() words it. `after_node`,
// when set, is called with each node's index once it ran (verify); it implies
// Order::program.
uint64_t run_program(const Graph& g, Order order = Order::planned,
                     const std::function<void(size_t)>& after_node = {});

// "node i of n (op, traced at file:line): what".
std::string node_failure(const Graph& g, size_t i, const char* what);

// Engine::submit on `device` for any number of storages: above Engine::kMaxStorages,
// extra tasks on the same stream carry the hazards of the rest (before and after the main
// task).
void submit_wide(Device device, const char* op, const std::vector<Storage*>& reads,
                 const std::vector<Storage*>& writes, std::function<void(const KernelContext&)> fn,
                 tide::SourceLocation site);

}  // namespace tide::trace
