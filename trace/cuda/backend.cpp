#include "trace/cuda/backend.h"

#include "trace/cuda/device_fusion.h"
#include "trace/cuda/device_graph.h"
#include "trace/cuda/device_loop.h"
#include "trace/cuda/exec_recycler.h"

namespace tide::trace {

void CudaBackend::prepare(Graph& g, std::shared_ptr<BackendState>& state) const {
  prepare_device_graph(g);
  if (!state) state = std::make_shared<ExecRecycler>();
  g.device_graph->recycler = std::static_pointer_cast<ExecRecycler>(state);
  prepare_device_fusion(g);  // fused chains as compiled or step-interpreter kernels
}

bool CudaBackend::runs_eagerly(const Graph& g, std::span<const Tensor> args) const {
  return aliases_written_memory(g, args);
}

std::vector<Tensor> CudaBackend::replay(const std::shared_ptr<Graph>& g,
                                        std::span<const Tensor> args, tide::SourceLocation site,
                                        size_t* allocated) const {
  return replay_graph(g, args, site, allocated);
}

std::vector<Tensor> CudaBackend::verify(const std::shared_ptr<Graph>& g,
                                        std::span<const Tensor> args, Fusion fusion,
                                        tide::SourceLocation site) const {
  (void)fusion;  // the graph runs what the plan fused; the node-by-node launch is the reference
  return verify_graph(g, args, site);
}

std::vector<Tensor> CudaBackend::add_loop(Recorder& outer, LoopNode node) const {
  return add_device_loop(outer, std::move(node));
}

BackendStats CudaBackend::stats(const Graph& g) const {
  BackendStats s;
  if (g.device_graph) {
    DeviceGraphStats d = g.device_graph->stats();
    s.graph_nodes = d.graph_nodes;
    s.graph_fallback = d.fallback;
    s.graph_ordinary_edges_because = d.ordinary_edges_because;
    s.graph_bytes = g.device_graph->held_bytes();
  }
  return s;
}

}  // namespace tide::trace
