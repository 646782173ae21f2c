// Programmatic dependent launch (Hopper and later; docs/architecture.md, CUDA), the graph side: a
// kernel node joined to the kernel before it by a programmatic edge may start while that kernel
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

// Makes func, a kernel loaded at run time (a compiled chain's, ops/cuda/fused.cu) that
// begins with await_prerequisite_grids, one of tide's for add_kernel_after. The kernels
// compiled into tide are found without it.
void register_awaiting_kernel(const void* func);

// Adds kernel node k to g after deps: joined to the kernel nodes among deps by programmatic
// edges when they are wanted (programmatic_edges_wanted, core/cuda/runtime.h), the device
// has them and k is a kernel of tide's compiled for compute capability 9.0 or later (whose
// prologue waits), else (or when CUDA refuses those) by ordinary edges. Throws "[cuda] ..." when
// CUDA refuses the node.
cudaGraphNode_t add_kernel_after(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                 const cudaKernelNodeParams& k);

// The node a captured `child` graph becomes in g after deps, when programmatic edges are
// wanted (programmatic_edges_wanted, core/cuda/runtime.h) and child is one kernel of
// tide's as add_kernel_after requires: that kernel node itself, joined to the kernel nodes
// among deps by programmatic edges. nullptr otherwise, or when CUDA will not describe the
// child's node: the caller adds child as a child-graph node.
cudaGraphNode_t add_dependent_kernel(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                     cudaGraph_t child);

}  // namespace tide::cuda
