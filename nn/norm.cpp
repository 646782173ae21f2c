// LayerNorm (nn/norm.h): parameters, PyTorch's initialisation and the input checks. The
// math is in ops/norm.cpp.
#include "nn/norm.h"

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

LayerNorm::LayerNorm(const LayerNormOptions& opt) : opt_(opt) {
  TIDE_CHECK(opt.normalized_features > 0 && opt.epsilon > 0, "LayerNorm",
             "needs features >= 1 and eps > 0, got ", opt.normalized_features, ", eps ",
             opt.epsilon);
  TIDE_CHECK(is_floating(opt.param_dtype), "LayerNorm", "needs a floating dtype, got ",
             opt.param_dtype);
  const Shape d{opt.normalized_features};
  if (opt.affine) {
    weight_ = register_parameter("weight", ones(d, opt.param_dtype));
    if (opt.has_bias) bias_ = register_parameter("bias", zeros(d, opt.param_dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  TIDE_CHECK(x.ndim() >= 1 && x.size(x.ndim() - 1) == opt_.normalized_features, "LayerNorm",
             "expected input (..., ", opt_.normalized_features, "), got ", x.shape());
  TIDE_CHECK(x.dtype() == opt_.param_dtype || autocast::active(), "LayerNorm", "input dtype ",
             x.dtype(), " differs from the parameters' ", opt_.param_dtype);
  return layer_norm(x, weight_, bias_, opt_.epsilon);
}

}  // namespace tide::nn
