// Dependencies between the nodes of a traced program: what lets independent branches run
// at the same time (trace::Options::streams). Two nodes depend on each other when they
// touch the same value and at least one of them writes it (read after write, write after
// read, write after write); every edge goes forward in program order. Backend-neutral:
// the CPU executor runs ready nodes on several threads (trace/cpu/parallel.h); the CUDA executor
// makes them the edges of its graph's nodes (trace/cuda/device_graph.h).
//
// Values are storages, so two values never share memory, with two exceptions the users of
// these edges handle: intermediates the planner places on the same arena bytes (the
// planner shares only between values the edges order, see Reachability), and arguments
// that alias each other or a captured tensor (the replay then runs in program order).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "trace/graph.h"

namespace tide::trace {

// The dependencies of g.nodes as they are now (after fusion, before or after planning).
Dependencies dependencies(const Graph& g);

// The transitive closure of a Dependencies: reaches(a, b) when b must run after a. One bit
// per pair of nodes (a 1000-node program takes 125 KB).
class Reachability {
 public:
  explicit Reachability(const Dependencies& d);
  bool reaches(int a, int b) const {
    return (bits_[size_t(a) * words_ + size_t(b) / 64] >> (b % 64)) & 1u;
  }

 private:
  size_t words_;
  std::vector<uint64_t> bits_;
};

// The nodes that touch each value, in program order.
std::vector<std::vector<int>> accessors(const Graph& g);

// Each value's live spans {first, last} in program order, from its accessors `acc`: one
// span from its first to its last access, split before every node that recomputes it
// (Node::recomputes), where it is dead in between. Empty for a value no node touches.
std::vector<std::vector<std::pair<int, int>>> live_spans(const Graph& g,
                                                         const std::vector<std::vector<int>>& acc);

}  // namespace tide::trace
