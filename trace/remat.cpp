// The memory budget's recomputation (trace/remat.h).
#include "trace/remat.h"

#include <algorithm>
#include <cstdint>

#include "ops/op_traits.h"
#include "trace/graph.h"
#include "trace/memory_plan.h"
#include "trace/planner.h"
#include "trace/schedule.h"

namespace tide::trace {

namespace {

constexpr int kMaxRecomputes = 4096;

using Spans = std::vector<std::pair<int, int>>;

bool writes(const Node& n, int v) {
  return std::find(n.writes.begin(), n.writes.end(), v) != n.writes.end();
}

// A node cheap and safe to run twice: one flat elementwise op that writes only `v`, does not
// read it, and draws no random numbers.
bool cheap_writer_of(const Node& n, int v) {
  if (!n.ew || n.fused || n.piece || n.writes.size() != 1 || n.writes[0] != v) return false;
  if (n.ew->id == OpId::dropout) return false;
  return std::find(n.reads.begin(), n.reads.end(), v) == n.reads.end();
}

struct Candidate {
  int value = -1, writer = -1, at = -1;
  size_t bytes = 0;
};

// The intermediate bytes alive at each node, and the node where they are most.
int busiest_node(const Graph& g, const std::vector<Spans>& spans) {
  std::vector<int64_t> delta(g.nodes.size() + 1, 0);
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (g.values[v].kind != ValueKind::intermediate) continue;
    for (auto [f, l] : spans[v]) {
      delta[size_t(f)] += int64_t(g.values[v].bytes);
      delta[size_t(l) + 1] -= int64_t(g.values[v].bytes);
    }
  }
  int best = -1;
  int64_t live = 0, most = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    live += delta[i];
    if (live > most) {
      most = live;
      best = int(i);
    }
  }
  return best;
}

// Whether value r holds, just before node `at`, the bytes it held when node w read it.
bool still_holds(const Graph& g, const std::vector<std::vector<int>>& acc,
                 const std::vector<Spans>& spans, int r, int w, int at) {
  for (int k : acc[size_t(r)])
    if (k > w && k < at && writes(g.nodes[size_t(k)], r)) return false;
  if (g.values[size_t(r)].kind != ValueKind::intermediate) return true;
  for (auto [f, l] : spans[size_t(r)])  // alive there anyway: in a span reaching `at`
    if (f <= w && l >= at) return true;
  return false;
}

Candidate choose(const Graph& g) {
  const std::vector<std::vector<int>> acc = accessors(g);
  const std::vector<Spans> spans = live_spans(g, acc);
  const int p = busiest_node(g, spans);
  Candidate best;
  if (p < 0) return best;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (val.kind != ValueKind::intermediate || val.bytes <= best.bytes) continue;
    for (auto [f, l] : spans[v]) {
      if (!(f < p && p < l)) continue;
      // The accesses around p: the value must be idle at p.
      bool idle = true;
      int before = -1, after = -1;
      for (int k : acc[v]) {
        if (k < f || k > l) continue;
        if (k == p) {
          idle = false;
          break;
        }
        if (k < p) before = k;
        else if (after < 0) after = k;
      }
      if (!idle || before < 0 || after < 0) continue;
      const Node& w = g.nodes[size_t(f)];
      if (!cheap_writer_of(w, int(v))) continue;
      bool ok = true;
      for (int k : acc[v])  // no in-place update between the write and the gap
        if (k > f && k <= before && writes(g.nodes[size_t(k)], int(v))) ok = false;
      for (int r : w.reads) ok = ok && still_holds(g, acc, spans, r, f, after);
      if (ok) best = {int(v), f, after, val.bytes};
    }
  }
  return best;
}

}  // namespace

std::string RematReport::str() const {
  auto mb = mb_text;
  std::string s = "memory budget " + mb(budget) + " MB: planned peak " + mb(peak_before) +
                  " MB -> " + mb(peak_after) + " MB, " + std::to_string(recomputed) +
                  " values recomputed (" + mb(bytes) + " MB)";
  if (!ops.empty()) {
    s += ": ";
    for (size_t i = 0; i < ops.size() && i < 8; ++i) s += (i ? ", " : "") + ops[i];
    if (ops.size() > 8) s += ", ...";
  }
  if (!applied) return s + " (not applied: the graph runs nodes at once)";
  if (!met()) s += "; the budget is not met (nothing else qualifies)";
  return s;
}

RematReport fit_budget(Graph& g, size_t budget) {
  RematReport r;
  r.budget = budget;
  layout(g);
  r.peak_before = r.peak_after = memory_plan(g).peak();
  if (g.concurrent()) return r;
  r.applied = true;
  for (int i = 0; i < kMaxRecomputes && r.peak_after > budget; ++i) {
    const Candidate c = choose(g);
    if (c.value < 0) break;
    Node copy = g.nodes[size_t(c.writer)];
    copy.recomputes = c.value;
    r.ops.push_back(copy.op);
    g.nodes.insert(g.nodes.begin() + c.at, std::move(copy));
    ++r.recomputed;
    r.bytes += c.bytes;
    layout(g);
    r.peak_after = memory_plan(g).peak();
  }
  return r;
}

}  // namespace tide::trace
