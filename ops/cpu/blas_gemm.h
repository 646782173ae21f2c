// The CPU's float and double GEMM on raw pointers: row-major c (m x n, row stride ldc) =
// op(a) @ op(b) through the configured library (cmake/Blas.cmake: OpenBLAS, BLIS, or oneDNN's
// sgemm for float). Sizes at most 2^31 - 1; k may be 0 (c = 0). Runs on the library's threads.
// Defined in ops/cpu/linalg.cpp; the GEMM entries and the 16-bit GEMMs' float32 path use it.
#pragma once

#include <cstdint>

namespace tide::kernels::cpu {

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float* c, int64_t ldc);
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double* c, int64_t ldc);

}  // namespace tide::kernels::cpu
