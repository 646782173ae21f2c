#include "nn/init.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

Fans compute_fans(const Shape& shape) {
  TIDE_CHECK(shape.ndim() >= 1, "init", "needs a shape of rank >= 1 to compute fans, got ", shape);
  TIDE_CHECK(shape.numel() > 0, "init", "shape ", shape, " has a zero extent");
  if (shape.ndim() == 1) return {shape[0], shape[0]};
  int64_t field = 1;
  for (int i = 2; i < shape.ndim(); ++i) field *= shape[i];
  return {shape[0] * field, shape[1] * field};
}

namespace {

void check_dtype(DType dtype) {
  TIDE_CHECK(is_floating(dtype), "init", "needs a floating dtype, got ", dtype);
}

// U(-b, b) as rand * 2b - b.
Tensor uniform(const Shape& shape, DType dtype, double b, Generator& gen) {
  check_dtype(dtype);
  NoGrad ng;
  return sub(mul(rand(shape, dtype, gen), 2.0 * b), b);
}

Tensor normal(const Shape& shape, DType dtype, double s, Generator& gen) {
  check_dtype(dtype);
  NoGrad ng;
  return mul(randn(shape, dtype, gen), s);
}

}  // namespace

Tensor xavier_uniform(const Shape& shape, DType dtype, double gain, Generator& gen) {
  Fans f = compute_fans(shape);
  return uniform(shape, dtype, gain * std::sqrt(6.0 / double(f.in + f.out)), gen);
}

Tensor xavier_normal(const Shape& shape, DType dtype, double gain, Generator& gen) {
  Fans f = compute_fans(shape);
  return normal(shape, dtype, gain * std::sqrt(2.0 / double(f.in + f.out)), gen);
}

Tensor kaiming_uniform(const Shape& shape, DType dtype, double gain, Generator& gen) {
  Fans f = compute_fans(shape);
  return uniform(shape, dtype, gain * std::sqrt(3.0 / double(f.in)), gen);
}

Tensor kaiming_normal(const Shape& shape, DType dtype, double gain, Generator& gen) {
  Fans f = compute_fans(shape);
  return normal(shape, dtype, gain / std::sqrt(double(f.in)), gen);
}

Tensor zeros_init(const Shape& shape, DType dtype) {
  check_dtype(dtype);
  NoGrad ng;
  return zeros(shape, dtype);
}

Tensor normal_init(const Shape& shape, double std, DType dtype, Generator& gen) {
  TIDE_CHECK(std >= 0 && std::isfinite(std), "init", "normal std must be finite and >= 0, got ",
             std);
  return normal(shape, dtype, std, gen);
}

Tensor initialize(Init kind, const Shape& shape, DType dtype, Generator& gen) {
  switch (kind) {
    case Init::xavier_uniform: return xavier_uniform(shape, dtype, 1.0, gen);
    case Init::xavier_normal: return xavier_normal(shape, dtype, 1.0, gen);
    case Init::kaiming_uniform: return kaiming_uniform(shape, dtype, std::sqrt(2.0), gen);
    case Init::kaiming_normal: return kaiming_normal(shape, dtype, std::sqrt(2.0), gen);
    case Init::zeros: return zeros_init(shape, dtype);
    case Init::normal: return normal_init(shape, 1.0, dtype, gen);
  }
  TIDE_ASSERT(false, "unknown Init");
  return {};
}

}  // namespace tide::nn
