// Scaled dot-product attention as one op: softmax(scale * q k^T (+ causal mask)) v with a
// fused, tiled kernel per device that keeps no T x T scores in memory (online softmax), and
// its gradient, which recomputes the scores tile by tile from q, k and the forward's
// per-row log-sum-exp. CPU kernels in ops/cpu/attention.cpp, CUDA ones in
// ops/cuda/attention.cu. All queued; none waits. Not here: dropout, an additive mask
// tensor, grouped or multi-query key/value heads.
#pragma once

#include <optional>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

// Attention of each query over the keys of its (batch, head): q (B, H, T, D), k and v
// (B, H, S, D), or all three 3-D with the heads folded into the batch ((B*H, T, D) and
// (B*H, S, D)); the output has q's shape. out[i] = sum_j softmax_j(scale * q_i . k_j) v_j.
// With `causal`, query i attends to keys j <= i only; it needs T == S (a causal mask of a
// query block against a longer key sequence is ambiguous, so it is refused). `scale`
// multiplies the scores; std::nullopt means 1 / sqrt(D); a given value must be finite.
// float32 or float64, all on one device; the result does not depend on the thread count.
// bfloat16 and float16: one kernel computing in float32, each output rounded once
// (docs/mixed-precision.md).
// Differentiable in q, k and v (the backward is scaled_dot_product_attention_grad). Throws
// "[scaled_dot_product_attention]" naming the shapes for ranks other than 3 or 4, ranks or
// batch/head dimensions that differ, D or S that differ between q, k and v, D == 0 or
// S == 0, causal with T != S, a non-finite scale, dtypes or devices that differ, and on a
// GPU for D past the kernel's shared-memory tiles (1024 for float32 and the 16-bit types,
// 512 for float64).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, std::optional<double> scale = std::nullopt,
                                    Site site = Site::current());

// The same over q, k and v packed in one tensor, qkv (3, B, H, T, D) or (3, B*H, T, D)
// (q = qkv[0], k = qkv[1], v = qkv[2], as a fused QKV projection makes them), with one
// gradient for qkv: the backward writes dq, dk and dv into one tensor, where three
// separate inputs sliced from qkv would each need a zero-padded copy and two adds.
// Results equal scaled_dot_product_attention on the slices. Throws
// "[scaled_dot_product_attention]" for a first dimension other than 3, ranks other than 4
// or 5, and the checks above.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, bool causal = false,
                                           std::optional<double> scale = std::nullopt,
                                           Site site = Site::current());
// The same over the rows of a fused QKV projection, without copies: qkv (B, T, 3, H, D) (its
// (B*T, 3*H*D) output reshaped; q = qkv[:, :, 0], k and v the next two) gives out
// (B, T, H, D), which reshapes to (B*T, H*D) for the output projection. The kernels read and
// write those rows in place of the head split and merge (three transposing copies each way).
// One gradient for qkv, of its shape. Results equal scaled_dot_product_attention on the
// heads (B, H, T, D) moved out of qkv, bit for bit. Throws "[scaled_dot_product_attention]"
// naming the shape for a rank other than 5 or a third dimension other than 3, and for the
// checks above.
Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, bool causal = false,
                                        std::optional<double> scale = std::nullopt,
                                        Site site = Site::current());
// The forward's two results: the output and the natural log of each query row's softmax
// denominator (including the max it subtracted), (B, H, T) or (B*H, T), which the
// backward needs.
struct AttentionForward {
  Tensor out, lse;
};
// scaled_dot_product_attention without recording a gradient, keeping lse (float32 for
// 16-bit q). Same checks and throws.
AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, bool causal = false,
                                                      std::optional<double> scale = std::nullopt,
                                                      Site site = Site::current());

// The gradients of scaled_dot_product_attention in q, k and v, computed together.
struct AttentionGrads {
  Tensor q, k, v;
};
// From dout (out's shape), the forward's inputs, its output and its lse, with the same
// causal and scale. Recomputes the scores tile by tile; dk and dv sum over the query
// tiles in a fixed order (no atomics), so the bits do not depend on the thread count.
// Not differentiable. Throws "[scaled_dot_product_attention_grad]" for the forward's
// argument errors and for dout, out or lse of the wrong shape, dtype or device.
AttentionGrads scaled_dot_product_attention_grad(const Tensor& dout, const Tensor& q,
                                                 const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse,
                                                 bool causal = false,
                                                 std::optional<double> scale = std::nullopt,
                                                 Site site = Site::current());

}  // namespace tide
