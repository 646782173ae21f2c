// The GPUs' trace backend (trace/backend.h), for a real GPU and the recording fake alike: a
// plan becomes one CUDA graph, built at its first replay and launched per call
// (trace/cuda/device_graph.h), with fused chains compiled or interpreted
// (trace/cuda/device_fusion.h), verify comparing the graph with a node-by-node launch, and a
// loop as a WHILE node (trace/cuda/device_loop.h). A function's signatures share spare
// graph execs (trace/cuda/exec_recycler.h): its BackendState.
#pragma once

#include "trace/backend.h"

namespace tide::trace {

class CudaBackend final : public Backend {
 public:
  void prepare(Graph& g, std::shared_ptr<BackendState>& state) const override;
  bool runs_eagerly(const Graph& g, std::span<const Tensor> args) const override;
  std::vector<Tensor> replay(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                             tide::SourceLocation site, size_t* allocated) const override;
  std::vector<Tensor> verify(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                             Fusion fusion, tide::SourceLocation site) const override;
  std::vector<Tensor> add_loop(Recorder& outer, LoopNode node) const override;
  BackendStats stats(const Graph& g) const override;
};

}  // namespace tide::trace
