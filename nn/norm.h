// LayerNorm over the last dimension, on ops/norm.h. Parameter names are PyTorch's (weight,
// bias), so a state_dict of the same architecture maps one to one. Not here: a
// normalized_shape of more than one dimension, RMSNorm.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace tide::nn {

// LayerNormOptions(D) with chainable setters: .eps(1e-6).elementwise_affine(false).
struct LayerNormOptions {
  explicit LayerNormOptions(int64_t features) : normalized_features(features) {}
  LayerNormOptions& eps(double e) {
    epsilon = e;
    return *this;
  }
  // false: no weight and no bias (both are then not parameters).
  LayerNormOptions& elementwise_affine(bool on) {
    affine = on;
    return *this;
  }
  // false: a weight but no bias (with elementwise_affine).
  LayerNormOptions& bias(bool on) {
    has_bias = on;
    return *this;
  }
  LayerNormOptions& dtype(DType t) {
    param_dtype = t;
    return *this;
  }
  int64_t normalized_features;
  double epsilon = 1e-5;
  bool affine = true, has_bias = true;
  DType param_dtype = DType::float32;
};

// layer_norm of each row of (..., D) inputs over D. Parameters weight (ones) and bias
// (zeros), PyTorch's defaults.
class LayerNorm : public Module {
 public:
  // Throws "[LayerNorm]" for features < 1, eps <= 0 or a non-floating dtype.
  explicit LayerNorm(const LayerNormOptions& opt);
  explicit LayerNorm(int64_t features) : LayerNorm(LayerNormOptions(features)) {}
  // Throws "[LayerNorm]" unless x is (..., D) of the parameters' dtype. Queued; does not wait.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  const Tensor& weight() const { return weight_; }  // undefined without affine parameters
  const Tensor& bias() const { return bias_; }      // undefined without a bias

 private:
  LayerNormOptions opt_;
  Tensor weight_, bias_;
};

}  // namespace tide::nn
