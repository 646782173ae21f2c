#include "trace/cuda/exec_recycler.h"

#include <utility>

namespace tide::trace {

ExecRecycler::~ExecRecycler() {
  for (SpareExec& s : spares_) destroy(s);
}

void ExecRecycler::destroy(SpareExec& s) {
  // In flight, an exec is freed when it completes (cudaGraphExecDestroy).
  if (s.exec) s.api->graph_exec_destroy(std::exchange(s.exec, nullptr));
  if (s.graph) s.api->graph_destroy(std::exchange(s.graph, nullptr));
}

void ExecRecycler::give(SpareExec s) {
  std::optional<SpareExec> dropped;
  {
    std::lock_guard lock(mu_);
    spares_.insert(spares_.begin(), std::move(s));
    if (spares_.size() > kMaxSpares) {
      dropped = std::move(spares_.back());
      spares_.pop_back();
    }
  }
  if (dropped) destroy(*dropped);
}

void ExecRecycler::need_ordinary_edges(std::string why) {
  std::lock_guard lock(mu_);
  ordinary_edges_because_ = std::move(why);
}

std::string ExecRecycler::ordinary_edges_because() const {
  std::lock_guard lock(mu_);
  return ordinary_edges_because_;
}

std::optional<SpareExec> ExecRecycler::take(cuda::DeviceApi* api) {
  std::lock_guard lock(mu_);
  for (auto it = spares_.begin(); it != spares_.end(); ++it)
    if (it->api == api) {
      SpareExec s = std::move(*it);
      spares_.erase(it);
      return s;
    }
  return std::nullopt;
}

}  // namespace tide::trace
