// TIDE_HOST_DEVICE marks functions compiled for both the CPU and CUDA kernels (empty for g++).
#pragma once

// TIDE_HOST_DEVICE_INLINE also forces inlining on the host: for functors too large for
// GCC's inliner at the four call sites of a binary loop, whose loops then stay scalar calls.
#if defined(__CUDACC__)
#define TIDE_HOST_DEVICE __host__ __device__ __forceinline__
#define TIDE_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define TIDE_HOST_DEVICE inline
#define TIDE_HOST_DEVICE_INLINE inline __attribute__((always_inline))
#endif
