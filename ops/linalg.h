// Matrix products and row-wise ops: matmul through CBLAS (sgemm/dgemm), transpose,
// softmax and log_softmax along the last axis. All queued; none waits.
#pragma once

#include "core/engine.h"
#include "core/tensor.h"

namespace tide {

struct MatmulOptions {
  bool trans_a = false;  // use a^T (a flag passed to BLAS: no copy)
  bool trans_b = false;
};

// op(a) @ op(b) for 2-D float32/float64 tensors. Throws "[matmul]" naming both shapes
// when ranks, dtypes or inner dimensions do not match.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions opt = {},
              Site site = Site::current());
// x @ w + b (b: one value per column, broadcast over rows), then ReLU when `relu`: the
// Linear layer as one kernel (on CUDA, cuBLASLt's bias / bias+ReLU epilogues; on the CPU a
// GEMM and one pass over the rows). x (N, K), w (K, M), b (M,), all float32 or float64 on
// one device. Differentiable in x, w and b. Throws "[linear]" naming the shapes otherwise.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu = false,
              Site site = Site::current());
// The transpose of a 2-D tensor, materialised (queued copy).
Tensor transpose(const Tensor& a, Site site = Site::current());
// exp(x - max) / sum(exp(x - max)) over the last axis (floating, rank >= 1).
Tensor softmax(const Tensor& a, Site site = Site::current());
// x - max - log(sum(exp(x - max))) over the last axis.
Tensor log_softmax(const Tensor& a, Site site = Site::current());

}  // namespace tide
