// TIDE_HOST_DEVICE marks functions compiled for both the CPU and CUDA kernels (empty for g++).
#pragma once

#if defined(__CUDACC__)
#define TIDE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TIDE_HOST_DEVICE inline
#endif
