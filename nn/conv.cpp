// Conv2d and BatchNorm2d (nn/conv.h): parameters, buffers, PyTorch's default
// initialisation and the input checks; the pooling and flatten layers are inline in the
// header. The math is in ops/conv.cpp.
#include "nn/conv.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

namespace {
// U(-bound, bound) as a new leaf.
Tensor uniform(const Shape& shape, double bound, DType dtype, Generator& gen) {
  NoGrad no_grad;
  return sub(mul(rand(shape, dtype, gen), 2.0 * bound), bound);
}
}  // namespace

// ---- Conv2d -------------------------------------------------------------------------------

Conv2d::Conv2d(const Conv2dOptions& opt, Generator& gen) : opt_(opt) {
  const int64_t g = opt.conv.group_count;
  TIDE_CHECK(opt.in_channels > 0 && opt.out_channels > 0 && opt.kernel[0] > 0 &&
                 opt.kernel[1] > 0 && g > 0,
             "Conv2d", "sizes must be positive, got in=", opt.in_channels,
             " out=", opt.out_channels, " kernel=(", opt.kernel[0], ", ", opt.kernel[1],
             ") groups=", g);
  TIDE_CHECK(opt.in_channels % g == 0 && opt.out_channels % g == 0, "Conv2d", "groups=", g,
             " must divide in=", opt.in_channels, " and out=", opt.out_channels);
  TIDE_CHECK(is_floating(opt.param_dtype), "Conv2d", "needs a floating dtype, got ",
             opt.param_dtype);
  const int64_t fan_in = opt.in_channels / g * opt.kernel[0] * opt.kernel[1];
  // PyTorch's reset_parameters: kaiming_uniform_(a = sqrt(5)) gives the bound
  // sqrt(6 / ((1 + 5) * fan_in)) = 1 / sqrt(fan_in), and the bias uses the same bound.
  const double bound = 1.0 / std::sqrt(double(fan_in));
  weight_ = register_parameter(
      "weight", uniform(Shape{opt.out_channels, opt.in_channels / g, opt.kernel[0], opt.kernel[1]},
                        bound, opt.param_dtype, gen));
  if (opt.with_bias)
    bias_ =
        register_parameter("bias", uniform(Shape{opt.out_channels}, bound, opt.param_dtype, gen));
}

Tensor Conv2d::forward(const Tensor& x) {
  TIDE_CHECK(x.ndim() == 4 && x.size(1) == opt_.in_channels, "Conv2d", "expected input (N, ",
             opt_.in_channels, ", H, W), got ", x.shape());
  TIDE_CHECK(x.dtype() == opt_.param_dtype || autocast::active(), "Conv2d", "input dtype ",
             x.dtype(), " differs from the parameters' ", opt_.param_dtype);
  return conv2d(x, weight_, bias_, opt_.conv);
}

// ---- BatchNorm2d ---------------------------------------------------------------------------

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& opt) : opt_(opt) {
  TIDE_CHECK(opt.num_features > 0 && opt.epsilon > 0 && opt.momentum_ >= 0 && opt.momentum_ <= 1,
             "BatchNorm2d", "needs num_features >= 1, eps > 0 and 0 <= momentum <= 1, got ",
             opt.num_features, ", eps ", opt.epsilon, ", momentum ", opt.momentum_);
  TIDE_CHECK(is_floating(opt.param_dtype), "BatchNorm2d", "needs a floating dtype, got ",
             opt.param_dtype);
  const Shape c{opt.num_features};
  weight_ = register_parameter("weight", ones(c, opt.param_dtype));
  bias_ = register_parameter("bias", zeros(c, opt.param_dtype));
  running_mean_ = register_buffer("running_mean", zeros(c, opt.param_dtype));
  running_var_ = register_buffer("running_var", ones(c, opt.param_dtype));
  num_batches_ = register_buffer("num_batches_tracked", zeros(Shape{}, DType::int64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  TIDE_CHECK(x.ndim() == 4 && x.size(1) == opt_.num_features, "BatchNorm2d", "expected input (N, ",
             opt_.num_features, ", H, W), got ", x.shape());
  TIDE_CHECK(x.dtype() == opt_.param_dtype || autocast::active(), "BatchNorm2d", "input dtype ",
             x.dtype(), " differs from the parameters' ", opt_.param_dtype);
  const bool training = is_training();
  Tensor y = batch_norm(x, weight_, bias_, running_mean_, running_var_, training, opt_.momentum_,
                        opt_.epsilon);
  if (training) increment_(num_batches_);
  return y;
}

}  // namespace tide::nn
