// The executable CUDA graphs of a trace::function's evicted signatures, kept for its next
// trace (docs/traced.md, On a GPU). Instantiating a graph costs host time per node; when a new
// signature's graph has the same topology as an evicted one (the same kernels and edges, other
// shapes or addresses: a function cycling through more shapes than its cache_budget), CUDA can
// instead rewrite the old exec's parameters in place (cudaGraphExecUpdate), and the build
// falls back to an instantiation when it refuses.
//
// A spare keeps the graph its exec was instantiated from and that graph's copy nodes: CUDA
// re-points an exec's copy node by the node of that graph, which the update pairs with the new
// graph's node in the same place.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/device_api.h"
#include "trace/backend.h"

namespace tide::trace {

struct SpareExec {
  cuda::DeviceApi* api = nullptr;
  cuda::GraphExecHandle exec = nullptr;
  cuda::GraphHandle graph = nullptr;  // exec's source graph, owned with it
  // Its copy nodes (nullptr: none): DeviceGraph's copy_in, copy_back and copy_out.
  std::vector<cuda::GraphNodeHandle> copy_in, copy_back, copy_out;
};

class ExecRecycler final : public BackendState {
 public:
  static constexpr size_t kMaxSpares = 2;

  ExecRecycler() = default;
  ~ExecRecycler();  // destroys the spares left
  ExecRecycler(const ExecRecycler&) = delete;
  ExecRecycler& operator=(const ExecRecycler&) = delete;

  // Keeps s (the most recent first); the oldest spare beyond kMaxSpares is destroyed.
  // Thread-safe: a graph's last owner may be an engine worker.
  void give(SpareExec s);
  // The most recent spare of api's device, or none. Thread-safe.
  std::optional<SpareExec> take(cuda::DeviceApi* api);
  // Destroys s's exec and its graph, and clears them (a second call does nothing).
  static void destroy(SpareExec& s);

  // Builds of this function's graphs: instantiated, or updated from a spare.
  std::atomic<int64_t> instantiated{0}, updated{0};
  void add_stats(BackendStats& s) const override {
    s.graph_instantiations = instantiated.load();
    s.graph_updates = updated.load();
  }

  // Why CUDA refused one of this function's graphs with programmatic edges (core/cuda/
  // dependent_launch.h), so that its later graphs are built with ordinary ones from the
  // start ("" while none was refused). Thread-safe.
  void need_ordinary_edges(std::string why);
  std::string ordinary_edges_because() const;

 private:
  mutable std::mutex mu_;
  std::vector<SpareExec> spares_;
  std::string ordinary_edges_because_;
};

}  // namespace tide::trace
