// The first statement of every kernel of tide's (programmatic dependent launch, Hopper and
// later; core/cuda/dependent_launch.h): in a CUDA graph a kernel node joined to the kernel
// before it by a programmatic edge may start while that kernel still runs. It waits here
// until the kernels it depends on have finished and their writes are visible, then lets
// its own dependents start launching. Launched any other way (a stream, an ordinary edge)
// the wait returns at once. Device code only, with no includes of its own: nvcc's kernels
// include it, and so does the source of a compiled chain (embedded for NVRTC,
// ops/chain_compiler.h). tests/core/test_kernel_prologues.cpp checks that every kernel
// calls it first.
#pragma once

namespace tide::cuda {

__device__ __forceinline__ void await_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace tide::cuda
