#include "trace/schedule.h"

#include <algorithm>

namespace tide::trace {

Dependencies dependencies(const Graph& g) {
  const size_t n = g.nodes.size();
  Dependencies d;
  d.successors.resize(n);
  d.predecessors.assign(n, 0);
  std::vector<int> last_writer(g.values.size(), -1);
  std::vector<std::vector<int>> readers(g.values.size());  // since the last write
  std::vector<int> depth(n, 1), preds;
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    preds.clear();
    for (int v : node.reads)
      if (last_writer[size_t(v)] >= 0) preds.push_back(last_writer[size_t(v)]);
    for (int v : node.writes) {
      if (last_writer[size_t(v)] >= 0) preds.push_back(last_writer[size_t(v)]);
      preds.insert(preds.end(), readers[size_t(v)].begin(), readers[size_t(v)].end());
    }
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    std::erase(preds, int(i));  // a node reading what it writes
    for (int p : preds) {
      d.successors[size_t(p)].push_back(int(i));
      depth[i] = std::max(depth[i], depth[size_t(p)] + 1);
    }
    d.predecessors[i] = int(preds.size());
    d.critical_path = std::max(d.critical_path, depth[i]);
    for (int v : node.reads) readers[size_t(v)].push_back(int(i));
    for (int v : node.writes) {
      last_writer[size_t(v)] = int(i);
      readers[size_t(v)].clear();
    }
  }
  return d;  // successors are ascending: nodes are visited in order
}

Reachability::Reachability(const Dependencies& d)
    : words_((d.successors.size() + 63) / 64), bits_(d.successors.size() * words_, 0) {
  // Backwards: what a node reaches is its successors and what they reach.
  for (size_t a = d.successors.size(); a-- > 0;) {
    uint64_t* row = &bits_[a * words_];
    for (int s : d.successors[a]) {
      row[size_t(s) / 64] |= uint64_t(1) << (s % 64);
      const uint64_t* srow = &bits_[size_t(s) * words_];
      for (size_t w = size_t(s) / 64; w < words_; ++w)
        row[w] |= srow[w];  // s reaches only later nodes
    }
  }
}

std::vector<std::vector<int>> accessors(const Graph& g) {
  std::vector<std::vector<int>> acc(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int v : g.nodes[i].reads) acc[size_t(v)].push_back(int(i));
    for (int v : g.nodes[i].writes) acc[size_t(v)].push_back(int(i));
  }
  for (auto& a : acc) a.erase(std::unique(a.begin(), a.end()), a.end());
  return acc;
}

std::vector<std::vector<std::pair<int, int>>> live_spans(const Graph& g,
                                                         const std::vector<std::vector<int>>& acc) {
  std::vector<std::vector<std::pair<int, int>>> spans(acc.size());
  for (size_t v = 0; v < acc.size(); ++v) {
    const std::vector<int>& a = acc[v];
    if (a.empty()) continue;
    int start = a.front(), prev = a.front();
    for (size_t k = 1; k < a.size(); ++k) {
      if (g.nodes[size_t(a[k])].recomputes == int(v)) {
        spans[v].push_back({start, prev});
        start = a[k];
      }
      prev = a[k];
    }
    spans[v].push_back({start, prev});
  }
  return spans;
}

}  // namespace tide::trace
