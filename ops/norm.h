// Normalisation over the last dimension: layer_norm (the transformer's) and its gradient
// (first order: layer_norm_grad records no gradient of its own). CPU kernels in
// ops/cpu/norm.cpp, CUDA ones in ops/cuda/norm.cu. All queued; none waits. Batch norm,
// which normalises over every dimension but the channels, is in ops/conv.h.
#pragma once

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

// Each row of x over its last dimension (D = x.size(-1)) normalised and scaled:
// y = (x - mean) / sqrt(var + eps) * weight + bias, with the row's mean and biased
// variance (PyTorch's layer_norm with normalized_shape (D,)). weight and bias (D,), x's
// dtype and device; either may be undefined (no scale, no shift). float32, float64,
// bfloat16 or float16 (loaded widened, statistics in float, each output rounded once); the
// sums are in double in a fixed order, so results do not depend on the thread count.
// Differentiable in x, weight and bias. Throws "[layer_norm]" naming the shapes for a 0-d
// x, weight or bias not of shape (D,), dtypes or devices that differ, or eps <= 0.
Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5, Site site = Site::current());

// The gradients of layer_norm, computed together; weight and bias are undefined unless
// asked for.
struct LayerNormGrads {
  Tensor x, weight, bias;
};
// From dy (x's shape), x, weight (undefined: no scale) and the statistics the forward kept
// (`stats` (2, R) for the R = x.numel() / D rows: row 0 the means, row 1 1 / sqrt(var +
// eps); float32 for 16-bit x, else x's dtype). dweight and dbias (D,) are the sums over the rows of
// dy * xhat and of dy; they are computed when `param_grads`. Not differentiable. Throws
// "[layer_norm_grad]" on mismatched shapes, dtypes or devices.
LayerNormGrads layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& stats, bool param_grads = true,
                               Site site = Site::current());

}  // namespace tide
