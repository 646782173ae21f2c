// GELU's tanh form over one contiguous run on the calling thread, for the Linear layer's GELU
// epilogue (ops/cpu/linalg.cpp, half_gemm.cpp): defined in elementwise.cpp, which compiles
// with -ffp-contract=off, so y has the bits of the gelu op's kernel on x. Not a public header.
#pragma once

#include <cstdint>

namespace tide::kernels::cpu {

// y[i] = GELU_tanh(x[i]) for i < n (16-bit: computed in float, rounded once). y may be x.
template <class T>
void gelu_tanh_serial(const T* x, T* y, int64_t n);

}  // namespace tide::kernels::cpu
