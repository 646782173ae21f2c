// Programmatic dependent launch (Hopper and later; DESIGN §8), the graph side: a kernel
// node joined to the kernel before it by a programmatic edge may start while that kernel
// still runs, so its launch overlaps the other's work instead of following it. Only
// kernels that begin with await_prerequisite_grids (core/cuda/await_grids.h) may be joined
// that way: tide's own (tests/core/test_kernel_prologues.cpp checks them). For
// nvcc-compiled files only.
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "core/cuda/await_grids.h"
#include "core/cuda/device_api.h"

namespace tide::cuda {

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
