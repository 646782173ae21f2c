// Checked CUDA calls: TIDE_CUDA_CHECK(call) throws tide::Error("[cuda] <function>
// failed: cudaErrorX: message") naming the call, and clears the thread's last error unless
// it is sticky (it is reported by the throw). For nvcc-compiled files only.
#pragma once

#include <cuda_runtime.h>

namespace tide::cuda {
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t e);
}

#define TIDE_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    cudaError_t tide_e_ = (call);                                               \
    if (tide_e_ != cudaSuccess) ::tide::cuda::throw_cuda_error(#call, tide_e_); \
  } while (0)
