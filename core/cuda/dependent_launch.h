// Programmatic dependent launch (Hopper and later; DESIGN §8): in a CUDA graph, a kernel
// node joined to the kernel before it by a programmatic edge may start while that kernel
// still runs, so its launch overlaps the other's work instead of following it. Every
// kernel of tide's begins with await_prerequisite_grids(): it waits there until the
// kernels it depends on have finished and their writes are visible, and then lets its
// own dependents start launching. Launched any other way (a stream, an ordinary edge) the
// wait returns at once. tests/core/test_kernel_prologues.cpp checks that every kernel in
// core/cuda and ops/cuda calls it first; the graph executor joins only such kernels by
// programmatic edges (core/cuda/dependent_launch.cu). For nvcc-compiled files only.
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "core/cuda/device_api.h"

namespace tide::cuda {

__device__ __forceinline__ void await_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Adds kernel node k, a kernel of tide's, to g after deps: joined to the kernel nodes
// among deps by programmatic edges when they are enabled (programmatic_edges_enabled,
// core/cuda/runtime.h) on a device that has them, else (or when CUDA refuses those) by
// ordinary edges. Throws "[cuda] ..." when CUDA refuses the node.
cudaGraphNode_t add_kernel_after(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                 const cudaKernelNodeParams& k);

// The node a captured `child` graph becomes in g after deps, when programmatic edges are
// enabled (programmatic_edges_enabled, core/cuda/runtime.h) and child is one kernel of
// tide's: that kernel node itself, joined to the kernel nodes among deps by programmatic
// edges (add_kernel_after). nullptr otherwise: the caller adds child as a child-graph
// node. Throws "[cuda] ..." when CUDA refuses a call it should accept.
cudaGraphNode_t add_dependent_kernel(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                     cudaGraph_t child);

}  // namespace tide::cuda
