// The kernel entries of the attention family (ops/kernel_entry.h): the fused forward, the
// gradient's per-row preparation and the gradient itself. CPU implementations in
// ops/cpu/attention.cpp, CUDA ones in ops/cuda/attention.cu.
#pragma once

#include <cstdint>

#include "core/float16.h"
#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// Where row i (of len) of head bh starts in an operand: (bh / heads) * len * row +
// (bh % heads) * d + i * row. The default, heads = 1 and row = 0 (read as d), is the
// contiguous (bh, len, d); heads = H and row = H * d is (B, len, H, d), the rows of a
// projection's output, and row = 3 * H * d the q, k or v part of a fused QKV projection's
// (B, len, 3, H, d), with k and v offset by H * d and 2 * H * d.
struct HeadRows {
  int64_t heads = 1, row = 0;
  TIDE_HOST_DEVICE int64_t stride(int64_t d) const { return row ? row : d; }
  TIDE_HOST_DEVICE int64_t at(int64_t bh, int64_t len, int64_t d, int64_t i) const {
    const int64_t r = stride(d);
    return (bh / heads) * len * r + (bh % heads) * d + i * r;
  }
};

// q (bh, t, d), k and v (bh, s, d), out (bh, t, d) laid out as `in` (q, k, v) and `rows`
// (out) say; lse (bh, t) contiguous. lse is float for the 16-bit types (compute_t), which the
// CPU computes in float32.
template <class T>
struct Attention {
  DataRef<T> q, k, v, out;
  DataRef<compute_t<T>> lse;
  int64_t bh = 0, t = 0, s = 0, d = 0;
  bool causal = false;
  double scale = 1.0;
  HeadRows in{}, rows{};
};

// rows = bh * t query rows of width d, dout and out laid out as `layout` with t rows per
// head: stats (2, rows) gets row 0 = lse and row 1 = delta_i = sum_d dout[i, d] * out[i, d],
// the term of the softmax's gradient that the gradient kernels need per query row.
template <class T>
struct AttentionGradPrep {
  DataRef<T> dout, out;
  DataRef<compute_t<T>> lse, stats;
  int64_t rows = 0, d = 0, t = 1;
  HeadRows layout{};
};

// dq, dk, dv from dout, q, k, v and the preparation's stats; shapes as in Attention, q, k,
// v, dq, dk and dv laid out as `in`, dout as `rows`.
template <class T>
struct AttentionGrad {
  DataRef<T> dout, q, k, v;
  DataRef<compute_t<T>> stats;
  DataRef<T> dq, dk, dv;
  int64_t bh = 0, t = 0, s = 0, d = 0;
  bool causal = false;
  double scale = 1.0;
  HeadRows in{}, rows{};
};

// The widest D the CUDA kernels' shared-memory tiles take, per element size; the
// front-end refuses wider heads on a GPU.
inline constexpr int64_t kAttentionCudaMaxD4 = 1024, kAttentionCudaMaxD8 = 512;

namespace cpu {
template <class T>
void attention(const KernelContext&, const Attention<T>&, const NoExtra&);
template <class T>
void attention_grad_prep(const KernelContext&, const AttentionGradPrep<T>&, const NoExtra&);
template <class T>
void attention_grad(const KernelContext&, const AttentionGrad<T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
