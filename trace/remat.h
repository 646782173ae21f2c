// Recomputation in traced mode (trace::Options::memory_budget): when a traced step's planned
// peak is over the budget, the planner recomputes activations instead of keeping them alive
// between their forward and backward uses (docs/checkpoint.md, Traced).
//
// The heuristic, one value at a time until the plan fits: find the program point where the
// most intermediate bytes are alive; among the values alive there but not used there, take
// the largest one that a cheap node can remake just before its next use, and place a copy of
// that node there. A node qualifies when it is a flat elementwise op (never a GEMM, a
// reduction, a norm or a random op), writes only that value, does not read it, and every
// value it reads still holds the same bytes at the new place (inputs and captures not
// written in between; intermediates alive there anyway). The copy runs the same kernel on
// the same inputs, so the replay stays bitwise equal to eager.
//
// Sequential CPU traces only: a GPU's graph and parallel branches (streams > 1) run nodes
// at once, and their plans are left as they are.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tide::trace {

struct Graph;

struct RematReport {
  size_t budget = 0;                       // 0: no budget was asked for
  bool applied = false;                    // false on a concurrent graph, which is left as it is
  size_t peak_before = 0, peak_after = 0;  // the planned peak (MemoryPlan::peak())
  int recomputed = 0;                      // nodes added
  size_t bytes = 0;                        // the recomputed values' bytes
  std::vector<std::string> ops;            // the recomputed ops, in the order chosen
  bool met() const { return budget == 0 || peak_after <= budget; }
  std::string str() const;  // one line: budget, peaks, what was recomputed
};

// Adds recompute nodes to g (traced, fused, not yet planned) until its planned peak is at
// most `budget` bytes or no value qualifies; leaves g laid out (trace/planner.h: layout) but
// not allocated. Does nothing for a concurrent graph (Graph::concurrent()).
RematReport fit_budget(Graph& g, size_t budget);

}  // namespace tide::trace
