#include "trace/cpu/backend.h"

#include "trace/cpu/executor.h"
#include "trace/cpu/loop_program.h"
#include "trace/cpu/verify.h"

namespace tide::trace {

void CpuBackend::prepare(Graph& g, std::shared_ptr<BackendState>& state) const {
  (void)g, (void)state;  // the planned program runs as it is
}

std::vector<Tensor> CpuBackend::replay(const std::shared_ptr<Graph>& g,
                                       std::span<const Tensor> args, tide::SourceLocation site,
                                       size_t* allocated) const {
  return replay_program(g, args, site, allocated);
}

std::vector<Tensor> CpuBackend::verify(const std::shared_ptr<Graph>& g,
                                       std::span<const Tensor> args, Fusion fusion,
                                       tide::SourceLocation site) const {
  return verify_program(g, args, fusion, site);
}

std::vector<Tensor> CpuBackend::add_loop(Recorder& outer, LoopNode node) const {
  return add_program_loop(outer, std::move(node));
}

}  // namespace tide::trace
