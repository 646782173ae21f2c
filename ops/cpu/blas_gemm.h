// The CPU's float and double GEMM on raw pointers: row-major c (m x n, row stride ldc) =
// op(a) @ op(b) through the configured library (cmake/Blas.cmake: OpenBLAS, BLIS, or oneDNN's
// sgemm for float). Sizes at most 2^31 - 1; k may be 0 (c = 0). Runs on the library's threads.
// Defined in ops/cpu/linalg.cpp; the GEMM entries and the 16-bit GEMMs' float32 path use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "ops/op_util.h"

namespace tide::kernels::cpu {

// Multiply-adds up to which a float or double product runs on the calling thread: OpenBLAS's
// own multithreading threshold is far above, and oneDNN's sgemm takes such a product in one
// part (ops/cpu/one_openmp_thread.h). A batch of them can then be spread over the pool
// without two thread pools competing for the cores, each product's bits those of a lone call.
inline constexpr int64_t kSmallGemm = 65536;

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float* c, int64_t ldc);
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double* c, int64_t ldc);

// The same for operands of type A that `load` turns into floats (a 16-bit type widened, a
// float32 rounded to TF32): op(a) and op(b), stored as given (a is k x m when ta, else
// m x k; b is n x k when tb, else k x n), are converted into the packed scratch sa and sb
// first, then the float GEMM writes c.
template <class A, class Load>
void blas_gemm_loaded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
                      const A* b, int64_t ldb, float* c, int64_t ldc, Load load,
                      std::vector<float>& sa, std::vector<float>& sb) {
  // Rows in parallel on tide's pool (an elementwise pass, so the bits do not depend on it).
  auto pack = [&load](const A* p, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& out) {
    out.resize(size_t(rows * cols));
    float* o = out.data();
    parallel_for(rows, tide::detail::grain_for(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < cols; ++j) o[r * cols + j] = load(p[r * ld + j]);
    });
  };
  const int64_t ac = ta ? m : k, bc = tb ? k : n;
  pack(a, ta ? k : m, ac, lda, sa);
  pack(b, tb ? n : k, bc, ldb, sb);
  blas_gemm(ta, tb, m, n, k, sa.data(), std::max<int64_t>(1, ac), sb.data(),
            std::max<int64_t>(1, bc), c, ldc);
}

}  // namespace tide::kernels::cpu
