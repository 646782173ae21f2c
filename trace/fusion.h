// Elementwise fusion: runs of consecutive flat elementwise nodes (ops whose op-table row
// says `elementwise` and not `in_place`, same element count and dtype) become one node
// whose kernel evaluates the whole run per block of elements. Values produced and
// consumed inside a run live in per-block registers and get no buffer; values the rest of
// the graph (or the caller) needs are written to memory.
#pragma once

#include <cstdint>
#include <vector>

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

struct FusedKernel {
  static constexpr int64_t kBlock = 256;  // elements per register
  static constexpr int kMaxRegisters = 16;
  struct Operand {
    enum Kind : uint8_t { reg, mem, scalar } kind = mem;
    int reg_index = -1;
    Storage* storage = nullptr;  // mem: resolved when the kernel runs
    int64_t offset = 0;          // mem: elements
    int64_t stride = 1;          // mem: 1 or 0
    alignas(8) unsigned char value[8] = {};
  };
  struct Step {
    tide::detail::EwBlockFn block = nullptr;
    alignas(8) unsigned char functor[16] = {};
    Operand a, b;
    Operand out;  // reg or mem
  };
  std::vector<Step> steps;
  int64_t n = 0;
  size_t elem_size = 4;
  int registers = 0;

  void run() const;
};

// Rewrites g.nodes; fused-away values become ValueKind::dead. Returns the number of
// fused nodes made.
int fuse(Graph& g, Fusion level);

}  // namespace tide::trace
