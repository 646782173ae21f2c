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
  static constexpr size_t kMaxIteratedSteps = 32;  // loop bodies up to this many steps
                                                   // keep their operand pointers per block
  struct Operand {
    enum Kind : uint8_t { reg, mem, scalar } kind = mem;
    int reg_index = -1;
    Storage* storage = nullptr;  // mem: resolved when the kernel runs
    int64_t offset = 0;          // mem: elements
    int64_t stride = 1;          // 1 (mem, reg) or 0 (mem repeated, scalar)
    alignas(8) unsigned char value[8] = {};
  };
  struct Step {
    tide::detail::EwBlockFn block = nullptr;
    tide::detail::EwIterateFn iterate = nullptr;                 // see run(iterations)
    kernels::FunctorId functor_id = kernels::FunctorId::count_;  // a GPU's chains
    alignas(8) unsigned char functor[16] = {};
    Operand a, b;
    Operand out;  // reg or mem
  };
  // What run() walks: one compact record per step (a long chain must stay in cache).
  struct Hot {
    tide::detail::EwBlockFn block = nullptr;
    tide::detail::EwIterateFn iterate = nullptr;
    int64_t repeat = 1;             // > 1: that many identical in-place steps (iterate)
    size_t step = 0;                // the first of them, in steps
    const void* functor = nullptr;  // into the step's functor bytes
    unsigned char* base[3] = {};    // a, b, out: mem (per run), scalar value; unused for reg
    uint32_t reg_offset[3] = {};
    int8_t stride[3] = {};   // passed to the block function
    int8_t advance[3] = {};  // elements to move per element of the block start
    bool is_reg[3] = {};
  };
  struct MemRef {  // a memory operand, resolved at the start of each run
    Storage* storage;
    size_t byte_offset;
    size_t step;
    int operand;
  };
  std::vector<Step> steps;
  std::vector<Hot> hot;
  std::vector<MemRef> mem;
  int64_t n = 0;
  size_t elem_size = 4;
  DType dtype = DType::float32;
  int registers = 0;

  // Builds `hot` from `steps`; call once after the steps are final. Consecutive identical
  // steps that update one register in place (an unrolled `for` of one op: y = y + 1, ...)
  // become one Hot run by the op's iterate function: the trace re-rolls the loop.
  void finalize();
  // Runs the chain over all n elements; callers serialise runs (the graph's run lock).
  // With iterations > 1, runs the whole chain that many times per block before moving on:
  // valid only when the chain's output is its own input (a trace::loop body bound in
  // place, see trace/loop.cpp), since every element's chain is independent. A one-step
  // chain whose state is its first operand runs the op's own iterate function (all
  // iterations per element in registers, no call per iteration).
  void run(int64_t iterations = 1);
};

// Rewrites g.nodes; fused-away values become ValueKind::dead. Returns the number of
// fused nodes made. `single_nodes` also turns a lone fusible node into a one-step fused
// kernel (loop bodies, so a loop can iterate it in registers).
int fuse(Graph& g, Fusion level, bool single_nodes = false);

}  // namespace tide::trace
