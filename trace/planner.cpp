#include "trace/planner.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "core/allocator.h"
#include "core/engine/capture.h"
#include "core/error.h"
#include "core/memory_record.h"
#include "trace/schedule.h"

namespace tide::trace {

namespace {
constexpr size_t kAlign = 64;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
using Spans = std::vector<std::pair<int, int>>;
bool overlaps(const Spans& a, const Spans& b) {
  for (auto [f, l] : a)
    for (auto [f2, l2] : b)
      if (f <= l2 && f2 <= l) return true;
  return false;
}
}  // namespace

PlanSummary layout(Graph& g) {
  g.deps = dependencies(g);
  // Lifetimes: the first and last node touching each value, and the spans between them in
  // which it is alive (a value the memory budget recomputes is dead in between).
  const std::vector<std::vector<int>> acc = accessors(g);
  const std::vector<Spans> spans = live_spans(g, acc);
  for (size_t i = 0; i < g.values.size(); ++i) {
    g.values[i].first = acc[i].empty() ? -1 : acc[i].front();
    g.values[i].last = acc[i].empty() ? -1 : acc[i].back();
  }
  PlanSummary s;
  std::vector<int> order;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    switch (v.kind) {
      case ValueKind::intermediate:
        if (v.first >= 0) order.push_back(int(i));
        s.unplanned_bytes += v.bytes;
        break;
      case ValueKind::output: s.output_bytes += v.bytes; break;
      case ValueKind::state:
      case ValueKind::constant: s.persistent_bytes += v.bytes; break;
      default: break;
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return g.values[size_t(a)].bytes > g.values[size_t(b)].bytes;
  });
  // Sequential replays: values whose lifetimes overlap in program order conflict. With
  // parallel branches, any two values the dependencies do not order may be alive at once.
  std::unique_ptr<Reachability> reach;
  if (g.concurrent()) reach = std::make_unique<Reachability>(g.deps);
  auto before = [&](int a, int b) {  // every access to a happens before every access to b
    for (int x : acc[size_t(a)])
      for (int y : acc[size_t(b)])
        if (x == y || !reach->reaches(x, y)) return false;
    return true;
  };
  auto conflict = [&](int a, int b) {
    const bool both = overlaps(spans[size_t(a)], spans[size_t(b)]);
    if (!reach) return both;
    return both || !(before(a, b) || before(b, a));
  };
  std::vector<int> placed;
  for (int id : order) {
    Value& v = g.values[size_t(id)];
    std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of live neighbours
    for (int p : placed) {
      const Value& w = g.values[size_t(p)];
      if (conflict(id, p)) busy.push_back({size_t(w.offset), size_t(w.offset) + aligned(w.bytes)});
    }
    std::sort(busy.begin(), busy.end());
    size_t need = aligned(v.bytes), best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (auto [b, e] : busy) {
      if (b > cursor && b - cursor >= need && b - cursor < best_gap) {
        best = cursor;
        best_gap = b - cursor;
      }
      cursor = std::max(cursor, e);
    }
    v.offset = int64_t(best != SIZE_MAX ? best : cursor);
    s.arena_bytes = std::max(s.arena_bytes, size_t(v.offset) + need);
    placed.push_back(id);
  }
  s.intermediates = int(order.size());
  g.arena_bytes = s.arena_bytes;
  g.unplanned_bytes = s.unplanned_bytes;
  return s;
}

PlanSummary plan(Graph& g) {
  PlanSummary s = layout(g);
  if (s.arena_bytes) {
    tide::detail::CapturePause pause;
    memory::RoleScope role(memory::Role::trace_arena);
    g.arena = Allocator::get(g.device).allocate(s.arena_bytes, "trace");
  }
  auto* base = g.arena ? static_cast<unsigned char*>(g.arena->data()) : nullptr;
  for (Value& v : g.values)
    if (v.kind == ValueKind::intermediate && v.first >= 0) v.storage->rebind(base + v.offset);
  return s;
}

namespace {

// Every accessor of `to` is reachable from every accessor of `from`, by a walk over the
// dependency edges (not through Reachability, which the planner used).
bool walk_ordered(const Graph& g, const std::vector<int>& from, const std::vector<int>& to) {
  std::vector<char> seen(g.nodes.size());
  std::vector<int> stack;
  for (int x : from) {
    std::fill(seen.begin(), seen.end(), 0);
    stack.assign(g.deps.successors[size_t(x)].begin(), g.deps.successors[size_t(x)].end());
    while (!stack.empty()) {
      int s = stack.back();
      stack.pop_back();
      if (seen[size_t(s)]) continue;
      seen[size_t(s)] = 1;
      for (int t : g.deps.successors[size_t(s)]) stack.push_back(t);
    }
    for (int y : to)
      if (!seen[size_t(y)]) return false;
  }
  return true;
}

// Parallel plans: two intermediates that share arena bytes must be ordered by the edges.
std::string check_parallel_sharing(const Graph& g) {
  if (g.deps.successors.size() != g.nodes.size()) return "the plan has no dependencies";
  std::vector<std::vector<int>> acc = accessors(g);
  for (size_t a = 0; a < g.values.size(); ++a) {
    const Value& v = g.values[a];
    if (v.kind != ValueKind::intermediate || acc[a].empty()) continue;
    for (size_t b = a + 1; b < g.values.size(); ++b) {
      const Value& w = g.values[b];
      if (w.kind != ValueKind::intermediate || acc[b].empty()) continue;
      bool disjoint = size_t(v.offset) + v.bytes <= size_t(w.offset) ||
                      size_t(w.offset) + w.bytes <= size_t(v.offset);
      if (disjoint || walk_ordered(g, acc[a], acc[b]) || walk_ordered(g, acc[b], acc[a])) continue;
      return "values " + std::to_string(a) + " and " + std::to_string(b) +
             " share bytes but no dependency orders them (parallel branches)";
    }
  }
  return {};
}

}  // namespace

std::string check_plan(const Graph& g) {
  // Lifetimes again, from the nodes: each intermediate's live spans, swept in program order.
  const std::vector<Spans> spans = live_spans(g, accessors(g));
  std::vector<std::pair<std::pair<int, int>, int>> starts;  // {span, value}
  for (size_t id = 0; id < g.values.size(); ++id)
    if (g.values[id].kind == ValueKind::intermediate)
      for (auto span : spans[id]) starts.push_back({span, int(id)});
  std::sort(starts.begin(), starts.end());
  std::vector<std::pair<int, int>> live;  // {last, value}
  for (const auto& start : starts) {
    const std::pair<int, int> span = start.first;
    const int id = start.second;
    std::erase_if(live, [&](const std::pair<int, int>& l) { return l.first < span.first; });
    const Value& v = g.values[size_t(id)];
    if (v.offset < 0 || size_t(v.offset) + v.bytes > g.arena_bytes)
      return "value " + std::to_string(id) + " lies outside the arena";
    for (auto [last, w] : live) {
      const Value& o = g.values[size_t(w)];
      bool disjoint = size_t(v.offset) + v.bytes <= size_t(o.offset) ||
                      size_t(o.offset) + o.bytes <= size_t(v.offset);
      if (!disjoint)
        return "values " + std::to_string(w) + " and " + std::to_string(id) +
               " are alive together at node " + std::to_string(span.first) + " but share bytes";
    }
    live.push_back({span.second, id});
  }
  if (g.concurrent()) return check_parallel_sharing(g);
  return {};
}

}  // namespace tide::trace
