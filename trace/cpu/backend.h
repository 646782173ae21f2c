// The CPU's trace backend (trace/backend.h): a replay is one engine task that runs the
// planned program (trace/cpu/executor.h), verify compares it node by node with a plain
// run (trace/cpu/verify.h), and a loop is a node running its body's program n times
// (trace/cpu/loop_program.h).
#pragma once

#include "trace/backend.h"

namespace tide::trace {

class CpuBackend final : public Backend {
 public:
  void prepare(Graph& g, std::shared_ptr<BackendState>& state) const override;
  std::vector<Tensor> replay(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                             tide::SourceLocation site, size_t* allocated) const override;
  std::vector<Tensor> verify(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                             Fusion fusion, tide::SourceLocation site) const override;
  std::vector<Tensor> add_loop(Recorder& outer, LoopNode node) const override;
};

}  // namespace tide::trace
