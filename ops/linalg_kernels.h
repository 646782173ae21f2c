// The linear-algebra family's kernel entries (ops/kernel_entry.h): GEMM, transpose and the
// row-wise softmax. CPU implementations in ops/cpu/linalg.cpp (OpenBLAS through CBLAS),
// CUDA's in ops/cuda/matmul.cu (cuBLASLt) and ops/cuda/rows.cu.
#pragma once

#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// Row-major c (m x n) = op(a) @ op(b), op = transpose when ta / tb; lda, ldb, ldc are the
// row strides (elements) of a, b and c as stored. k may be 0 (c = 0).
template <class T>
struct Gemm {
  DataRef<T> a, b, c;
  int64_t m = 0, n = 0, k = 0, lda = 1, ldb = 1, ldc = 1;
  bool ta = false, tb = false;
};
// c = op(a) @ op(b) + bias (one value per column of c, i.e. per output feature), then
// ReLU when relu: the Linear layer in one kernel (cuBLASLt's bias epilogues on CUDA).
template <class T>
struct GemmBias {
  Gemm<T> g;
  DataRef<T> bias;
  bool relu = false;
};
// y (cols x rows) = a (rows x cols) transposed.
template <class T>
struct Transpose {
  DataRef<T> a, y;
  int64_t rows = 0, cols = 0;
};
// Each of `rows` rows of n elements: y = softmax(x) (log_softmax when log), computed as
// x - max then exp / sum with the sum in double.
template <class T>
struct SoftmaxRows {
  DataRef<T> x, y;
  int64_t rows = 0, n = 0;
  bool log = false;
};

namespace cpu {
template <class T>
void gemm(const KernelContext&, const Gemm<T>&, const NoExtra&);
template <class T>
void gemm_bias(const KernelContext&, const GemmBias<T>&, const NoExtra&);
template <class T>
void transpose(const KernelContext&, const Transpose<T>&, const NoExtra&);
template <class T>
void softmax_rows(const KernelContext&, const SoftmaxRows<T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
