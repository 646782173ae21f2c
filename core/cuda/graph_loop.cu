// A counted loop inside a CUDA graph without the host: a start kernel, then a WHILE node
// (two when unrolled) whose body ends each iteration with a step kernel. The kernels read
// the count on the device and set the WHILE nodes' conditions (cudaGraphSetConditional),
// so no iteration and no tensor count costs a host synchronisation.
#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/dependent_launch.h"
#include "core/cuda/graph_loop.h"
#include "core/loop_count.h"

namespace tide::cuda {

namespace {

struct LoopKernelArgs {
  LoopCopy copies[kMaxLoopCopies];
  int num_copies;
  int start;                        // 1: the start kernel (reads the count); 0: a step
  cudaGraphConditionalHandle cond;  // the start kernel's conds.main, or the step's
  cudaGraphConditionalHandle rest;  // the start kernel's conds.rest (threshold > 1)
  long long threshold;              // the start kernel's conds.unroll, or the step's
  long long iterations;             // a step's: what it takes off the counter
  long long* counter;
  const void* count;  // device memory, or null: `fixed`
  int count_dtype;    // DType
  long long fixed;
  LoopRandom random;  // num_ops 0: none
};

// Every thread of the grid copies its share of each copy (16-byte words where the copy is
// aligned), then one thread moves the counter and sets the condition; the condition is
// read when the body (or the start node) has completed, so the copies are done by then.
__global__ void loop_kernel(LoopKernelArgs a) {
  tide::cuda::await_prerequisite_grids();
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int c = 0; c < a.num_copies; ++c) {
    auto* d = static_cast<unsigned char*>(a.copies[c].dst);
    const auto* s = static_cast<const unsigned char*>(a.copies[c].src);
    const size_t n = a.copies[c].bytes;
    if (d == s) continue;
    if (((uintptr_t(d) | uintptr_t(s) | n) & 15) == 0) {
      auto* d4 = reinterpret_cast<uint4*>(d);
      const auto* s4 = reinterpret_cast<const uint4*>(s);
      for (size_t i = tid; i < n / 16; i += stride) d4[i] = s4[i];
    } else {
      for (size_t i = tid; i < n; i += stride) d[i] = s[i];
    }
  }
  if (tid == 0) {
    advance_loop_random(a.random, a.start);
    const long long n =
        a.start ? loop_count(a.count, DType(a.count_dtype), a.fixed) : *a.counter - a.iterations;
    *a.counter = n;
    cudaGraphSetConditional(a.cond, loop_unrolled_body_runs(n, a.threshold) ? 1u : 0u);
    if (a.start && a.threshold > 1)
      cudaGraphSetConditional(a.rest, loop_remainder_runs(n, a.threshold) ? 1u : 0u);
  }
}

}  // namespace

namespace {
std::string refusal(cudaError_t e) {
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}
}  // namespace

bool create_condition(cudaGraph_t g, ConditionalHandle* cond, std::string* why) {
  cudaGraphConditionalHandle h = 0;
  // Reset to 0 at every launch: only the loop's start kernel lets it begin.
  cudaError_t e = cudaGraphConditionalHandleCreate(&h, g, 0, cudaGraphCondAssignDefault);
  if (e != cudaSuccess) {
    if (why) *why = refusal(e);
    return false;
  }
  *cond = h;
  return true;
}

cudaGraphNode_t add_while_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                               ConditionalHandle cond, cudaGraph_t* body, std::string* why) {
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = cond;
  p.conditional.type = cudaGraphCondTypeWhile;
  p.conditional.size = 1;
  cudaGraphNode_t node = nullptr;
  cudaError_t e = cudaGraphAddNode(&node, g, reinterpret_cast<const cudaGraphNode_t*>(deps.data()),
                                   nullptr, deps.size(), &p);
  if (e != cudaSuccess) {
    if (why) *why = refusal(e);
    return nullptr;
  }
  *body = p.conditional.phGraph_out[0];
  return node;
}

namespace {

cudaGraphNode_t add_loop_kernel_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                     LoopKernelArgs a, std::span<const LoopCopy> copies,
                                     const LoopRandom* random) {
  if (copies.size() > kMaxLoopCopies || (random && random->num_ops > kMaxLoopRandom))
    throw_cuda_error(
        "a loop kernel with more than kMaxLoopCopies copies or kMaxLoopRandom "
        "random ops",
        cudaErrorInvalidValue);
  size_t bytes = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    a.copies[i] = copies[i];
    bytes = std::max(bytes, copies[i].bytes);
  }
  a.num_copies = int(copies.size());
  if (random) a.random = *random;
  constexpr unsigned kThreads = 256;
  // One 16-byte word per thread of the largest copy, at most 1024 blocks (grid-strided).
  const size_t blocks = std::clamp<size_t>((bytes / 16 + kThreads - 1) / kThreads, 1, 1024);
  void* params[] = {&a};
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(&loop_kernel);
  p.gridDim = dim3(unsigned(blocks));
  p.blockDim = dim3(kThreads);
  p.kernelParams = params;
  // After a body's kernels, the step kernel may start launching while they run.
  return add_kernel_after(g, deps, p);
}

}  // namespace

cudaGraphNode_t add_loop_start_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                    const LoopConditions& conds, int64_t* counter,
                                    const LoopCount& count, std::span<const LoopCopy> copies,
                                    const LoopRandom* random) {
  if (conds.unroll < 1) throw_cuda_error("a loop unrolled fewer than once", cudaErrorInvalidValue);
  LoopKernelArgs a{};
  a.start = 1;
  a.cond = conds.main;
  a.rest = conds.rest;
  a.threshold = conds.unroll;
  a.counter = reinterpret_cast<long long*>(counter);
  a.count = count.tensor;
  a.count_dtype = int(count.dtype);
  a.fixed = count.fixed;
  return add_loop_kernel_node(g, deps, a, copies, random);
}

cudaGraphNode_t add_loop_step_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                   ConditionalHandle cond, int64_t threshold, int64_t* counter,
                                   int64_t iterations, std::span<const LoopCopy> copies,
                                   const LoopRandom* random) {
  if (iterations < 1 || (iterations > 1 && random))
    throw_cuda_error("a loop step of fewer than one iteration, or of several with random ops",
                     cudaErrorInvalidValue);
  LoopKernelArgs a{};
  a.cond = cond;
  a.threshold = threshold;
  a.iterations = iterations;
  a.counter = reinterpret_cast<long long*>(counter);
  return add_loop_kernel_node(g, deps, a, copies, random);
}

}  // namespace tide::cuda
