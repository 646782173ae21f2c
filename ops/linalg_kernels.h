// The linear-algebra family's kernel entries (ops/kernel_entry.h): GEMM, transpose, the
// row-wise softmax and one-hot rows. CPU implementations in ops/cpu/linalg.cpp (OpenBLAS
// through CBLAS), CUDA's in ops/cuda/matmul.cu (cuBLASLt; one-hot rows) and ops/cuda/rows.cu.
#pragma once

#include <cstdint>

#include "core/float16.h"
#include "core/host_device.h"
#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// Row-major c (m x n) = op(a) @ op(b), op = transpose when ta / tb; lda, ldb, ldc are the
// row strides (elements) of a, b and c as stored. k may be 0 (c = 0). Every size is at most
// 2^31 - 1 (BLAS takes int; the front-ends refuse more).
template <class T>
struct Gemm {
  DataRef<T> a, b, c;
  int64_t m = 0, n = 0, k = 0, lda = 1, ldb = 1, ldc = 1;
  bool ta = false, tb = false;
  // float32 on a GPU only: the float32 matmul precision was `high` when the GEMM was queued
  // (core/matmul_precision.h), so CUDA may round the operands to TF32.
  bool tf32 = false;
};
// The batches of a batched GEMM (the Extra of the batched entry, with a Gemm<T> whose a, b
// and c are batch 0's): `outer` x `count` products; product (o, i) reads a at
// o * outer_a + i * stride_a and b at o * outer_b + i * stride_b elements past batch 0's (a
// stride of 0 broadcasts that operand) and writes c's (o * count + i)-th m x n block (c is
// contiguous, ldc = n). The front-end merges batch dimensions so that two loops suffice.
struct GemmBatch {
  int64_t count = 1, stride_a = 0, stride_b = 0;
  int64_t outer = 1, outer_a = 0, outer_b = 0;
};
// Outer batch o of bt: g with a, b and c moved to that batch's first product (its `count`
// products then step by bt.stride_a, bt.stride_b and m * ldc). Host code of the entries.
template <class T>
Gemm<T> outer_batch(const Gemm<T>& g, const GemmBatch& bt, int64_t o) {
  Gemm<T> s = g;
  s.a.offset += o * bt.outer_a;
  s.b.offset += o * bt.outer_b;
  s.c.offset += o * bt.count * g.m * g.ldc;
  return s;
}
// What follows a Linear layer's bias in its kernel.
enum class LinearAct : uint8_t { none, relu, gelu_tanh };
// c = op(a) @ op(b) + bias (one value per column of c, i.e. per output feature), then `act`:
// the Linear layer in one kernel (cuBLASLt's bias epilogues on CUDA). With gelu_tanh, pre
// (c's shape and ldc) gets the value before it, which the gradient needs, and c GELU's tanh
// form of pre, with the bits of the gelu op on pre.
template <class T>
struct GemmBias {
  Gemm<T> g;
  DataRef<T> bias;
  LinearAct act = LinearAct::none;
  DataRef<T> pre{};
};
// y (cols x rows) = a (rows x cols) transposed.
template <class T>
struct Transpose {
  DataRef<T> a, y;
  int64_t rows = 0, cols = 0;
};
// y = a with two axes exchanged: a viewed as (outer, n1, mid, n2, inner) is written as
// (outer, n2, mid, n1, inner). Both contiguous; inner runs are copied whole.
template <class T>
struct SwapAxes {
  DataRef<T> a, y;
  int64_t outer = 1, n1 = 1, mid = 1, n2 = 1, inner = 1;
};
// The run of a (of `inner` elements) that y's run r holds: y[o, j, m, i] = a[o, i, m, j].
TIDE_HOST_DEVICE int64_t swap_axes_source_run(int64_t r, int64_t n1, int64_t mid, int64_t n2) {
  const int64_t i = r % n1;
  r /= n1;
  const int64_t m = r % mid;
  r /= mid;
  const int64_t j = r % n2;
  const int64_t o = r / n2;
  return ((o * n1 + i) * mid + m) * n2 + j;
}
// Each of `rows` rows of n elements: y = softmax(x) (log_softmax when log), computed as
// x - max then exp / sum with the sum in double.
template <class T>
struct SoftmaxRows {
  DataRef<T> x, y;
  int64_t rows = 0, n = 0;
  bool log = false;
};

// Row i of y (rows x classes) is 1 at column labels[i] and 0 elsewhere: the targets of a
// classification loss. A label outside [0, classes) fails the CPU entry (an error naming the
// first such label, its row and the class count); the CUDA entry cannot throw, so it fills
// that row with NaN instead (a loss over it is NaN).
template <class T, class L>
struct OneHotRows {
  DataRef<L> labels;
  DataRef<T> y;
  int64_t rows = 0, classes = 0;
};

// Row i of x (rows x classes): lse[i] = log(sum(exp(x[i, :]))) and loss[i] = lse[i] -
// x[i, labels[i]], with the sum in double after subtracting the row's max. A label outside
// [0, classes) fails the CPU entry (as OneHotRows) and makes loss[i] NaN on CUDA.
// 16-bit logits load widened; lse is then float32 (compute_t<T>) and the loss is rounded
// through float: the float32 kernel's bits between casts.
template <class T, class L>
struct CrossEntropyRows {
  DataRef<T> x;
  DataRef<L> labels;
  DataRef<T> loss;
  DataRef<compute_t<T>> lse;
  int64_t rows = 0, classes = 0;
};
// dx[i, j] = (exp(x[i, j] - lse[i]) - (j == labels[i])) * g[i]: softmax minus one-hot,
// scaled by the row's loss gradient. A label outside [0, classes): the CPU entry fails,
// CUDA writes NaN over the row.
template <class T, class L>
struct CrossEntropyGrad {
  DataRef<T> x;
  DataRef<compute_t<T>> lse;
  DataRef<T> g;
  DataRef<L> labels;
  DataRef<T> dx;
  int64_t rows = 0, classes = 0;
};

namespace cpu {
template <class T, class L>
void cross_entropy_rows(const KernelContext&, const CrossEntropyRows<T, L>&, const NoExtra&);
template <class T, class L>
void cross_entropy_grad(const KernelContext&, const CrossEntropyGrad<T, L>&, const NoExtra&);
template <class T, class L>
void one_hot_rows(const KernelContext&, const OneHotRows<T, L>&, const NoExtra&);
template <class T>
void gemm(const KernelContext&, const Gemm<T>&, const NoExtra&);
template <class T>
void gemm_batched(const KernelContext&, const Gemm<T>&, const GemmBatch&);
template <class T>
void gemm_bias(const KernelContext&, const GemmBias<T>&, const NoExtra&);
template <class T>
void transpose(const KernelContext&, const Transpose<T>&, const NoExtra&);
template <class T>
void swap_axes(const KernelContext&, const SwapAxes<T>&, const NoExtra&);
template <class T>
void softmax_rows(const KernelContext&, const SoftmaxRows<T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
