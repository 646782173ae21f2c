// Elementwise fusion: runs of consecutive flat elementwise nodes (ops whose op-table row
// says `elementwise` and not `in_place`, same element count and dtype) become one node
// whose kernel runs the whole run as one fused chain (ops/fused_chain.h: the CPU entry
// per block of elements, a GPU's kernel per element). Values produced and consumed inside
// a run live in registers and get no buffer; values the rest of the graph (or the caller)
// needs are written to memory.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ops/fused_chain.h"
#include "trace/graph.h"

namespace tide::trace {

enum class Fusion {
  none,         // replay the recorded kernels: results bit-identical to eager
  elementwise,  // fuse elementwise runs (declared tolerance: fusion_tolerance())
};

// The largest relative difference from eager a fused replay may show, per dtype. The
// fused kernels apply the same functors in the same precision, so in practice results
// match bit for bit; the tolerance leaves room for the compiler vectorising a fused loop
// differently.
double fusion_tolerance(DType dtype);

// A fused node's chain in the kernels' form (ops/fused_chain.h), with identical in-place
// register steps re-rolled into one (ChainStep::repeat: an unrolled `for` of one op), and
// where its memory operands live: graph slots a replay rebinds, so their addresses are
// resolved when the chain runs.
struct BoundChain {
  struct MemRef {  // a memory operand: steps[step]'s a, b or out (operand 0, 1, 2)
    Storage* storage = nullptr;
    int64_t offset = 0;  // elements
    size_t step = 0;
    int operand = 0;
  };
  std::vector<kernels::ChainStep> steps;
  std::vector<MemRef> mem;
  int64_t n = 0;
  DType dtype = DType::float32;

  // The steps with their memory operands at their storages' current addresses, or at
  // redirect[storage] where given.
  std::vector<kernels::ChainStep> at_addresses(
      const std::unordered_map<const Storage*, void*>& redirect = {}) const;
  // Runs the chain on the CPU (kernels::cpu::fused_chain) over all n elements; callers
  // serialise runs (the graph's run lock). With iterations > 1, runs the whole chain that
  // many times per element: valid only when the chain's output is its own input (a
  // trace::loop body bound in place, see trace/loop.cpp).
  void run(int64_t iterations = 1);
};

// Rewrites g.nodes; fused-away values become ValueKind::dead. Returns the number of
// fused nodes made. `single_nodes` also turns a lone fusible node into a one-step fused
// chain (loop bodies, so a loop can iterate it in registers).
int fuse(Graph& g, Fusion level, bool single_nodes = false);

}  // namespace tide::trace
