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

// q (bh, t, d), k and v (bh, s, d), out (bh, t, d), lse (bh, t); all contiguous. lse is
// float for the 16-bit types (compute_t), which the CPU computes in float32.
template <class T>
struct Attention {
  DataRef<T> q, k, v, out;
  DataRef<compute_t<T>> lse;
  int64_t bh = 0, t = 0, s = 0, d = 0;
  bool causal = false;
  double scale = 1.0;
};

// rows = bh * t query rows of width d: stats (2, rows) gets row 0 = lse and row 1 =
// delta_i = sum_d dout[i, d] * out[i, d], the term of the softmax's gradient that the
// gradient kernels need per query row.
template <class T>
struct AttentionGradPrep {
  DataRef<T> dout, out;
  DataRef<compute_t<T>> lse, stats;
  int64_t rows = 0, d = 0;
};

// dq, dk, dv from dout, q, k, v and the preparation's stats; shapes as in Attention.
template <class T>
struct AttentionGrad {
  DataRef<T> dout, q, k, v;
  DataRef<compute_t<T>> stats;
  DataRef<T> dq, dk, dv;
  int64_t bh = 0, t = 0, s = 0, d = 0;
  bool causal = false;
  double scale = 1.0;
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
