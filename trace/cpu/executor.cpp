// The CPU executor (trace/cpu/executor.h).
#include "trace/cpu/executor.h"

#include <mutex>
#include <stdexcept>

#include "core/allocator.h"
#include "core/kernel_context.h"
#include "core/profiler.h"
#include "trace/cpu/parallel.h"

namespace tide::trace {

uint64_t run_program(const Graph& g, Order order, const std::function<void(size_t)>& after_node) {
  if (order == Order::planned && g.streams > 1 && !after_node && g.nodes.size() > 1)
    return run_parallel(g);
  const uint64_t allocated_before = tide::detail::tl_allocated_bytes;
  bool profiling = profiler::enabled();
  int stream = profiler::detail::tl_running_stream;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    int64_t t0 = profiling ? profiler::detail::now_ns() : 0;
    try {
      n.kernel(cpu_kernel_context());
    } catch (const std::exception& e) {
      throw std::runtime_error(node_failure(g, i, e.what()));
    }
    if (profiling) profiler::detail::record_op({n.op, stream, t0, t0, profiler::detail::now_ns()});
    if (after_node) after_node(i);
  }
  return tide::detail::tl_allocated_bytes - allocated_before;
}

std::vector<Tensor> replay_program(const std::shared_ptr<Graph>& gp, std::span<const Tensor> args,
                                   tide::SourceLocation site, size_t* allocated) {
  CallBindings c = prepare_call(*gp, args);
  if (allocated) *allocated += c.allocated;
  std::vector<Tensor> result = std::move(c.result);
  std::vector<Storage*> reads = std::move(c.reads), writes = std::move(c.writes);
  // The task keeps the graph (and so every slot and kernel) alive until it ran.
  submit_wide(
      Device::cpu(), "trace_replay", reads, writes,
      [gp, c = std::move(c)](const KernelContext&) {
        std::lock_guard<std::mutex> lock(gp->run_mu);
        c.bind(*gp);
        gp->run_allocated.store(run_program(*gp, c.in_order ? Order::program : Order::planned),
                                std::memory_order_relaxed);
        c.finish();
      },
      site);
  return result;
}

}  // namespace tide::trace
