#include "trace/memory_plan.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <unordered_set>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"
#include "trace/graph.h"

namespace tide::trace {

MemoryPlan memory_plan(const Graph& g) {
  // The leaves whose gradients the function binds: their captured storages are parameters.
  std::unordered_set<const Storage*> leaves;
  for (const Graph::GradBinding& b : g.grad_bindings)
    if (std::shared_ptr<TensorImpl> leaf = b.leaf.lock()) leaves.insert(leaf->storage.get());
  MemoryPlan p;
  // Where the last output is first written: intermediates last used before it are done
  // when the outputs can be read.
  int outputs_at = -1;
  for (const Graph::Output& o : g.outputs)
    if (o.value >= 0) outputs_at = std::max(outputs_at, g.values[size_t(o.value)].first);
  int nodes = 0;
  for (const Value& v : g.values) nodes = std::max(nodes, v.last + 1);
  // What an eager step has alive at each op: + at a value's first use, - after its last.
  std::vector<int64_t> live_delta(size_t(nodes) + 1, 0);
  auto eager_own = [&](const Value& v, size_t b) {  // made or given anew by each eager step
    if (v.first < 0 || v.last < 0) return;
    if (v.last > outputs_at) p.step_after_outputs += b;
    live_delta[size_t(v.kind == ValueKind::input ? 0 : v.first)] += int64_t(b);
    live_delta[size_t(v.last) + 1] -= int64_t(b);
  };
  std::unordered_set<const Storage*> seen;  // a storage two values share counts once
  for (const Value& v : g.values) {
    if (v.bytes == 0) continue;
    if (v.kind == ValueKind::intermediate || v.kind == ValueKind::dead) {
      const size_t b = Allocator::round_size(v.bytes);
      p.unshared += b;
      if (v.last > outputs_at) p.unshared_after_outputs += b;
      eager_own(v, b);
      continue;
    }
    if (v.storage && !seen.insert(v.storage.get()).second) continue;
    const size_t b = Allocator::round_size(v.bytes);
    if (v.kind != ValueKind::capture) eager_own(v, b);
    switch (v.kind) {
      case ValueKind::input: p.inputs += b; break;
      case ValueKind::capture:
        (leaves.count(v.storage.get()) ? p.parameters : p.captured) += b;
        break;
      case ValueKind::state: p.state += b; break;
      case ValueKind::constant: p.constants += b; break;
      case ValueKind::output: p.outputs += b; break;
      default: break;
    }
  }
  int64_t live = 0;
  for (int64_t d : live_delta) {
    live += d;
    p.step_live_peak = std::max(p.step_live_peak, size_t(std::max<int64_t>(live, 0)));
  }
  p.arena = g.arena_bytes ? Allocator::round_size(g.arena_bytes) : 0;
  return p;
}

std::string mb_text(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string MemoryPlan::str() const {
  auto mb = mb_text;
  return "parameters " + mb(parameters) + " MB, other captured " + mb(captured) + " MB, state " +
         mb(state) + " MB, constants " + mb(constants) + " MB, arena " + mb(arena) +
         " MB, inputs " + mb(inputs) + " MB, outputs " + mb(outputs) + " MB; peak " + mb(peak()) +
         " MB (eager, one step queued ahead: " + mb(eager_peak(1)) + " MB)";
}

}  // namespace tide::trace
