#include "trace/planner.h"

#include <algorithm>
#include <numeric>

#include "core/allocator.h"
#include "core/capture.h"
#include "core/error.h"

namespace tide::trace {

namespace {
constexpr size_t kAlign = 64;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
bool overlaps(const Value& a, const Value& b) { return a.first <= b.last && b.first <= a.last; }
}  // namespace

PlanSummary plan(Graph& g) {
  for (Value& v : g.values) v.first = v.last = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto touch = [&](int id) {
      Value& v = g.values[size_t(id)];
      if (v.first < 0) v.first = int(i);
      v.last = int(i);
    };
    for (int id : g.nodes[i].reads) touch(id);
    for (int id : g.nodes[i].writes) touch(id);
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
  std::vector<int> placed;
  for (int id : order) {
    Value& v = g.values[size_t(id)];
    std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of live neighbours
    for (int p : placed) {
      const Value& w = g.values[size_t(p)];
      if (overlaps(v, w)) busy.push_back({size_t(w.offset), size_t(w.offset) + aligned(w.bytes)});
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
  if (s.arena_bytes) {
    tide::detail::CapturePause pause;
    g.arena = Allocator::get().allocate(s.arena_bytes, "trace");
  }
  auto* base = g.arena ? static_cast<unsigned char*>(g.arena->data()) : nullptr;
  for (int id : order) {
    Value& v = g.values[size_t(id)];
    v.storage->rebind(base + v.offset);
  }
  return s;
}

std::string check_plan(const Graph& g) {
  // Lifetimes again, from the nodes.
  std::vector<int> first(g.values.size(), -1), last(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto touch = [&](int id) {
      if (first[size_t(id)] < 0) first[size_t(id)] = int(i);
      last[size_t(id)] = int(i);
    };
    for (int id : g.nodes[i].reads) touch(id);
    for (int id : g.nodes[i].writes) touch(id);
  }
  std::vector<int> live;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::erase_if(live, [&](int id) { return last[size_t(id)] < int(i); });
    for (size_t id = 0; id < g.values.size(); ++id) {
      const Value& v = g.values[id];
      if (v.kind != ValueKind::intermediate || first[id] != int(i)) continue;
      if (v.offset < 0 || size_t(v.offset) + v.bytes > g.arena_bytes)
        return "value " + std::to_string(id) + " lies outside the arena";
      for (int w : live) {
        const Value& o = g.values[size_t(w)];
        bool disjoint = size_t(v.offset) + v.bytes <= size_t(o.offset) ||
                        size_t(o.offset) + o.bytes <= size_t(v.offset);
        if (!disjoint)
          return "values " + std::to_string(w) + " and " + std::to_string(id) +
                 " are alive together at node " + std::to_string(i) + " but share bytes";
      }
      live.push_back(int(id));
    }
  }
  return {};
}

}  // namespace tide::trace
