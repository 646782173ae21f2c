// The kernel entries of the normalisation family (ops/kernel_entry.h): layer norm and its
// gradient. CPU implementations in ops/cpu/norm.cpp, CUDA ones in ops/cuda/norm.cu.
#pragma once

#include <cstdint>

#include "core/float16.h"
#include "core/host_device.h"
#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// x viewed as (rows, d). Writes y and stats (2 x rows: mean, 1 / sqrt(var + eps)). 16-bit
// x, weight and bias load widened; the statistics are float (compute_t<T>) and each output
// is rounded from double to float and then to T: the float32 kernel's bits between casts.
template <class T>
struct LayerNorm {
  DataRef<T> x, weight, bias, y;
  DataRef<compute_t<T>> stats;
  int64_t rows = 0, d = 0;
  bool has_weight = false, has_bias = false;
  double eps = 1e-5;
};

// How the sums over the rows for dweight and dbias are split: `parts` consecutive chunks
// of `chunk` rows (the last may hold fewer), each summed in row order into its own partial
// (parts (parts, 2, d), double), then the partials added in part order. The split depends
// only on the row count, so the sums give the same bits on any thread count, on every run
// and every GPU, without atomics.
struct RowParts {
  int64_t parts = 1, chunk = 0;
};
inline constexpr int64_t kLayerNormMaxParts = 128, kLayerNormMinChunk = 8;
TIDE_HOST_DEVICE constexpr RowParts layer_norm_parts(int64_t rows) {
  if (rows <= 0) return {1, 0};
  int64_t parts = (rows + kLayerNormMinChunk - 1) / kLayerNormMinChunk;
  if (parts > kLayerNormMaxParts) parts = kLayerNormMaxParts;
  const int64_t chunk = (rows + parts - 1) / parts;
  return {(rows + chunk - 1) / chunk, chunk};
}

// dx (and, when param_grads, dweight and dbias through the partials) from dy, x, weight
// (unless !has_weight) and the forward's stats.
template <class T>
struct LayerNormGrad {
  DataRef<T> dy, x, weight, dx, dweight, dbias;
  DataRef<compute_t<T>> stats;
  DataRef<double> parts;
  int64_t rows = 0, d = 0;
  RowParts split;
  bool has_weight = false, param_grads = false;
};

namespace cpu {
template <class T>
void layer_norm(const KernelContext&, const LayerNorm<T>&, const NoExtra&);
template <class T>
void layer_norm_grad(const KernelContext&, const LayerNormGrad<T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
