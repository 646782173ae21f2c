// Matrix products and row-wise ops: matmul through CBLAS (sgemm/dgemm), transpose,
// softmax and log_softmax along the last axis, one-hot rows. All queued; none waits.
#pragma once

#include <cstdint>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

struct MatmulOptions {
  bool trans_a = false;  // use a^T (a flag passed to BLAS: no copy)
  bool trans_b = false;
};

// op(a) @ op(b) for floating tensors of rank >= 2 (bfloat16/float16: float32 accumulation,
// one rounding; docs/mixed-precision.md): (m, k) @ (k, n) -> (m, n), and
// batched, (..., m, k) @ (..., k, n) -> (..., m, n) with the batch dimensions (all but the
// last two) broadcast NumPy's way (a 2-D operand is used by every batch); op transposes the
// last two dimensions (a flag passed to BLAS: no copy). Differentiable in both: a broadcast
// operand's gradient sums over the batches it served. Throws "[matmul]" naming both shapes
// for a rank below 2, differing dtypes, inner dimensions that differ, "batch dimensions do
// not broadcast", batch dimensions that broadcast in more than two separate groups, and,
// before anything is allocated, when a product with a nonempty output has a dimension or a
// batch count past 2^31 - 1 (BLAS takes int sizes: "... exceeds the 32-bit dimension limit
// of BLAS"; the same on every device). Queued; does not wait.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions opt = {},
              Site site = Site::current());
// What linear applies after its bias.
enum class Activation : uint8_t { none, relu, gelu_tanh };
// x @ w + b (b: one value per column, broadcast over rows), then `act`: the Linear layer as
// one kernel (on CUDA, cuBLASLt's bias / bias+ReLU epilogues; on the CPU the bias and the
// activation run on each part of the GEMM's rows right after it). gelu_tanh gives the bits of
// gelu(linear(x, w, b), GeluApprox::tanh) on the CPU, and keeps x @ w + b for the gradient (as
// that pair would). x (N, K), w (K, M), b (M,), all of one floating dtype (16-bit as matmul)
// on one device. Differentiable in x, w and b. Throws "[linear]" naming the shapes otherwise,
// and for N, K or M past 2^31 - 1 as matmul does.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
              Site site = Site::current());
// The same, ReLU when `relu`.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu = false,
              Site site = Site::current());
// One-hot rows: (N, classes) of `dtype` (float32 or float64), 1 at column labels[i] and 0
// elsewhere; labels (N) int32 or int64. Not differentiable. The labels are on the device, so
// their range is checked when the kernel runs, without a wait: a label outside
// [0, classes) fails the op on the CPU ("[op] label 200 of row 3 is outside the 10 classes
// [0, 10)", thrown by the first sync that touches the result or anything computed from
// it); a CUDA kernel cannot throw, so on a GPU that row is NaN instead (a loss over it is
// NaN). `op` names the op in errors (a string literal: a loss passes its own name). Throws
// "[op]" at the call for labels that are not 1-D integers, classes < 1 or a non-floating
// dtype.
Tensor one_hot(const Tensor& labels, int64_t classes, DType dtype = DType::float32,
               const char* op = "one_hot", Site site = Site::current());
// Per row of logits (N, C), floating (16-bit: computed in float, the log-sum-exp kept in
// float32, the loss rounded once): the cross-entropy -log(softmax(row))[label] =
// logsumexp(row) - row[label], as an (N) tensor. Neither the (N, C) one-hot nor the
// log-softmax is made: the forward keeps each row's log-sum-exp (N values), and the
// gradient (softmax - one-hot, times the row's gradient) is one pass over the logits.
// labels: (N) int32 or int64 on the logits' device; a label outside [0, C) is found when
// the kernel runs, as in one_hot (the CPU fails the op; a GPU makes that row NaN).
// Differentiable in logits. Throws "[op]" at the call for bad ranks, sizes, dtypes or
// devices. Queued; does not wait.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& labels,
                          const char* op = "cross_entropy", Site site = Site::current());
// The transpose of a 2-D tensor, materialised (queued copy).
Tensor transpose(const Tensor& a, Site site = Site::current());
// a with axes dim0 and dim1 exchanged (PyTorch's transpose(dim0, dim1)), materialised as a
// contiguous copy (tide's tensors are contiguous): (B, T, H, D) -> (B, H, T, D) with 1, 2.
// Negative dims count from the end; equal dims give a copy. Any dtype; differentiable (the
// gradient swaps back). Throws "[swap_axes]" naming the shape for a dim outside [-ndim,
// ndim). Queued; does not wait.
Tensor swap_axes(const Tensor& a, int64_t dim0, int64_t dim1, Site site = Site::current());
// exp(x - max) / sum(exp(x - max)) over the last axis (floating, rank >= 1; 16-bit rows are
// computed in float and rounded once, their gradient in float32).
Tensor softmax(const Tensor& a, Site site = Site::current());
// x - max - log(sum(exp(x - max))) over the last axis.
Tensor log_softmax(const Tensor& a, Site site = Site::current());

}  // namespace tide
