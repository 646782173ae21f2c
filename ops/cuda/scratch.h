// Scratch memory for library calls inside a CUDA kernel entry (CUB's temporary storage,
// sort buffers): the stream's workspace when it is large enough, else a workspace block.
// For nvcc-compiled files only.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "core/allocator.h"
#include "core/kernel_context.h"

namespace tide::kernels::cuda {

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}

// `bytes` of scratch for the running entry: the stream's workspace when it is large
// enough, else a workspace block that `keep` holds until the entry returns (the allocator
// tags it with the running task; it refuses while a CUDA graph captures).
inline void* scratch(const KernelContext& ctx, size_t bytes, StorageRef& keep, const char* op) {
  // No bytes: nothing is read or written there, so the node is not marked as a workspace
  // user; CUB still needs a non-null pointer (null means "query the size").
  if (bytes == 0 && ctx.workspace) return ctx.workspace;
  if (bytes == 0) bytes = 1;
  if (ctx.workspace && bytes <= ctx.workspace_bytes) return use_workspace(ctx, bytes);
  keep = Allocator::get(ctx.device).workspace(bytes, op);
  return keep->data();
}

// Runs a CUB call twice: once for the size of its scratch, then on that scratch.
template <class Call>
void run_cub(const KernelContext& ctx, const char* op, const char* what, Call call) {
  size_t bytes = 0;
  check(call(nullptr, bytes), what);
  StorageRef keep;
  void* tmp = scratch(ctx, bytes, keep, op);
  check(call(tmp, bytes), what);
}

}  // namespace tide::kernels::cuda
