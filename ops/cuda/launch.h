// Shared by the CUDA kernel files: launch geometry, the checked-launch helper and the
// stream of a kernel context. Kernels index with int64_t: tensors may pass 2^31 elements.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/kernel_context.h"

namespace tide::kernels::cuda {

inline cudaStream_t stream_of(const KernelContext& ctx) { return cudaStream_t(ctx.stream); }

constexpr int kThreads = 256;

// Blocks for `work` items at kThreads per block, capped: kernels loop grid-stride.
inline unsigned blocks_for(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  return unsigned(std::clamp<int64_t>(b, 1, int64_t(1) << 20));
}

// Index of this thread and the grid's stride, for grid-stride loops.
__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace tide::kernels::cuda
