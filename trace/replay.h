// The device-neutral pieces of a replay, which every backend (trace/backend.h) builds on:
// what a graph reads and writes outside itself, one call's bindings (inputs and fresh
// outputs bound to the graph's slots, random counters reserved in eager order), a failing
// node's words, and the engine submit of a replay that touches many storages.
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

// "node i of n (op, traced at file:line): what".
std::string node_failure(const Graph& g, size_t i, const char* what);

// Engine::submit on `device` for any number of storages: above Engine::kMaxStorages,
// extra tasks on the same stream carry the hazards of the rest (before and after the main
// task).
void submit_wide(Device device, const char* op, const std::vector<Storage*>& reads,
                 const std::vector<Storage*>& writes, std::function<void(const KernelContext&)> fn,
                 tide::SourceLocation site);

}  // namespace tide::trace
