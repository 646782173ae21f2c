// The traced graph: values (storages an op reads or writes) and nodes (ops in recording
// order, which is a valid execution order). Backend-neutral: the planner and the fusion
// pass see only value ids, sizes, lifetimes and op descriptions; each node also carries
// the kernel its op's front-end recorded for the trace's device. The CPU executor
// (trace/replay.h) runs them; on a GPU trace/cuda/device_graph.h captures them into a CUDA graph.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/engine/capture.h"
#include "core/rng.h"
#include "core/shape.h"
#include "core/source_location.h"
#include "core/storage.h"
#include "ops/elementwise_desc.h"

namespace tide::trace {

enum class ValueKind : uint8_t {
  input,         // a tensor argument: bound to the caller's tensor on every call
  capture,       // a tensor f reads without receiving it (a parameter): used by reference
  intermediate,  // created and consumed inside f: lives in the planned arena
  output,        // returned by f: a fresh tensor on every call
  state,         // created inside f and kept by f's side effects (a gradient): persistent
  constant,      // created inside f from host data: persistent, never written by a node
  dead,          // created inside f and never used
};
const char* name(ValueKind k);

struct Value {
  StorageRef storage;  // a slot for inputs/intermediates/outputs/state/constants
  size_t bytes = 0;
  ValueKind kind = ValueKind::intermediate;
  int first = -1, last = -1;  // program indices of the first and last node touching it
  int64_t offset = -1;        // intermediates: byte offset in the arena
  int num_writers = 0, num_readers = 0;
};

struct BoundChain;
struct DeviceGraph;
struct GraphPiece;

struct Node {
  const char* op = "";
  tide::SourceLocation site;
  std::vector<int> reads, writes;                   // value ids
  tide::detail::Kernel kernel;                      // plain nodes: the recorded kernel
  std::optional<tide::detail::ElementwiseDesc> ew;  // flat elementwise ops: for fusion
  std::shared_ptr<BoundChain> fused;                // a fused chain (kernel runs it)
  int fused_ops = 1;                                // recorded ops this node stands for
  // On a GPU, a node that adds its own nodes to the CUDA graph instead of being captured
  // (a loop: a WHILE node and its body; trace/cuda/device_graph.h).
  std::shared_ptr<GraphPiece> piece;
  // A copy of an earlier node placed by the memory budget (trace/remat.h): it writes this
  // value again, which is dead between its previous accesses and here. -1 for the others.
  int recomputes = -1;
};

// Philox counters a random op reads at run time: refreshed from `gen` on every replay.
struct RandomCounter {
  Generator* gen = nullptr;
  uint64_t numel = 0;
  std::unique_ptr<uint64_t[]> slot;  // {offset, key}
  StorageRef device_slot;            // on a GPU: the {offset, key} the kernel reads
};

// Which nodes must run before which (trace/schedule.h): the IR's edges between nodes, for
// executors that run independent branches at once (CPU: several threads; CUDA: the edges
// of a cudaGraph). Program order is always one valid order.
struct Dependencies {
  std::vector<std::vector<int>> successors;  // per node: nodes that wait for it, ascending
  std::vector<int> predecessors;             // per node: how many nodes it waits for
  int critical_path = 0;                     // nodes on the longest chain
};

struct Graph {
  Device device = Device::cpu();  // where every value lives (a trace runs on one device)
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<Node> reference;  // verify only: the recorded nodes before fusion
  std::vector<int> inputs;      // value id per tensor argument
  struct Output {
    int value = -1;  // the storage's value
    Shape shape;
    DType dtype = DType::float32;
    int64_t offset = 0;  // elements into the storage
  };
  std::vector<Output> outputs;
  std::vector<RandomCounter> random;
  // What a backward in the function did to a leaf's .grad (its first effect on that leaf),
  // which a replay cannot redo on the host: checked and applied per call (trace/function.h).
  struct GradBinding {
    std::weak_ptr<TensorImpl> leaf;
    std::shared_ptr<TensorImpl> grad;  // the gradient tensor the replays write
    bool taken = false;                // made the first gradient (else added to `grad`)
    bool reset_first = false;          // the function reset .grad (zero_grad) before
  };
  std::vector<GradBinding> grad_bindings;
  // Host work before each replay of the CUDA graph (collectives' agreements), in recording
  // order; the node-by-node launch runs it in the nodes instead.
  std::vector<std::shared_ptr<tide::detail::ReplayHook>> replay_hooks;
  StorageRef arena;  // intermediates
  size_t arena_bytes = 0;
  size_t unplanned_bytes = 0;  // sum of the intermediates' sizes (no sharing)
  int recorded_ops = 0;        // ops recorded before fusion
  // On a GPU (prepare_device_fusion): fused nodes whose chain runs NVRTC-compiled, and why
  // the last one that does not runs interpreted ("" when none).
  int compiled_chains = 0;
  std::string chain_fallback;
  // Branch parallelism (trace::Options::streams): with streams > 1 the planner shares
  // arena bytes only between values the dependencies order, and the executor runs ready
  // nodes on up to `streams` threads. deps is filled for every planned graph.
  int streams = 1;
  Dependencies deps;
  // Nodes may run at once: parallel branches on the CPU, and always on a GPU, whose CUDA
  // graph runs independent nodes concurrently. The planner then shares arena bytes only
  // between values the dependencies order.
  bool concurrent() const { return streams > 1 || !device.is_cpu(); }
  // Whether a node adds its own part to a CUDA graph (Node::piece: a loop).
  bool has_pieces() const {
    for (const Node& n : nodes)
      if (n.piece) return true;
    return false;
  }
  // On a GPU: the CUDA graph built for this plan at its first replay (trace/cuda/device_graph.h).
  std::shared_ptr<DeviceGraph> device_graph;
  // Values outside the arena that some node reads / writes (inputs, captures, state):
  // what a replay declares to the engine. Filled by prepare_replay().
  std::vector<int> external_reads, external_writes;
  std::mutex run_mu;  // one replay at a time uses the arena and the slot bindings
  // Bytes the kernels of the last finished replay allocated while they ran (workspaces).
  std::atomic<uint64_t> run_allocated{0};
};

}  // namespace tide::trace
