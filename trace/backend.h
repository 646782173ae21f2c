// The executor of a planned trace on one kind of device: the trace's counterpart of the
// ops' kernel entries (ops/kernel_entry.h). The CPU runs the planned program
// (trace/cpu/), a GPU one CUDA graph per plan (trace/cuda/). trace::function and trace::loop
// reach a device only through here. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/source_location.h"
#include "core/tensor.h"
#include "trace/fusion.h"
#include "trace/graph.h"
#include "trace/loop_node.h"

namespace tide::trace {

class Recorder;

// The device's side of FunctionStats: of the last call's plan, and of the function.
struct BackendStats {
  size_t graph_nodes = 0;                    // nodes of its CUDA graph (0 on the CPU)
  size_t graph_bytes = 0;                    // the graph's fixed buffers and workspace
  std::string graph_fallback;                // why its replays launch node by node ("": none)
  std::string graph_ordinary_edges_because;  // why its graph has no programmatic edges
  int64_t graph_instantiations = 0, graph_updates = 0;  // over the function's signatures
};

// What a function keeps for its backend across its signatures (a GPU's spare graph execs).
struct BackendState {
  virtual ~BackendState() = default;
  // Adds what it counted over the function's life to s.
  virtual void add_stats(BackendStats& s) const { (void)s; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // After g (one signature of a function) was fused and planned: what the device needs
  // before the first replay. `state` is the function's, shared by its signatures; the
  // backend makes it when it needs one.
  virtual void prepare(Graph& g, std::shared_ptr<BackendState>& state) const = 0;
  // Whether this call must run the function eagerly instead of replaying g (a CUDA graph
  // cannot take an argument that aliases memory the graph writes).
  virtual bool runs_eagerly(const Graph& g, std::span<const Tensor> args) const {
    (void)g, (void)args;
    return false;
  }
  // Queues one replay of g with `args` bound to g.inputs (same shapes and dtypes as traced).
  // Returns the outputs: fresh tensors for values the graph computes, the same tensors for
  // arguments, captures or state returned as they are. Adds the bytes it allocated
  // (outputs only) to *allocated. Does not wait.
  virtual std::vector<Tensor> replay(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                                     tide::SourceLocation site, size_t* allocated) const = 0;
  // The replay in verify mode (trace::Options::verify): checks the plan against a plain run
  // and throws "[trace] ..." naming the first node that differs. Waits.
  virtual std::vector<Tensor> verify(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                                     Fusion fusion, tide::SourceLocation site) const = 0;
  // Records the node of a traced trace::loop into `outer` (the enclosing recording) and
  // returns the loop's results, fresh values of the enclosing graph.
  virtual std::vector<Tensor> add_loop(Recorder& outer, LoopNode node) const = 0;
  // The device's figures for FunctionStats of g, the last call's plan.
  virtual BackendStats stats(const Graph& g) const {
    (void)g;
    return {};
  }
};

// The backend of device d's kind: the CPU's, or the GPUs' (a real GPU or the recording
// fake; compiled in every build).
const Backend& backend_for(Device d);

}  // namespace tide::trace
