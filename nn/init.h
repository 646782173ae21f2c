// Parameter initialisers: each returns a new leaf tensor of the given shape (no autograd
// history; built under NoGrad), filled from the Philox generator `gen`. Queued; none waits.
//
// Fans follow tide's Linear layout, weight (in, out): for a 2-D shape, fan_in = shape[0]
// and fan_out = shape[1] (PyTorch stores (out, in) and reads them the other way round).
// A 1-D shape has fan_in = fan_out = shape[0]. Higher ranks multiply both fans by the
// product of the trailing extents (the receptive field).
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"

namespace tide::nn {

// normal: N(0, std^2) with a std the caller gives (LinearOptions::init_std; 1 in initialize).
enum class Init { xavier_uniform, xavier_normal, kaiming_uniform, kaiming_normal, zeros, normal };

struct Fans {
  int64_t in = 0, out = 0;
};
// Throws "[init] ..." for a rank-0 shape or a zero extent.
Fans compute_fans(const Shape& shape);

// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform(const Shape& shape, DType dtype = DType::float32, double gain = 1.0,
                      Generator& gen = default_generator());
// N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal(const Shape& shape, DType dtype = DType::float32, double gain = 1.0,
                     Generator& gen = default_generator());
// U(-b, b) with b = gain * sqrt(3 / fan_in); the default gain sqrt(2) suits ReLU.
Tensor kaiming_uniform(const Shape& shape, DType dtype = DType::float32,
                       double gain = 1.4142135623730951, Generator& gen = default_generator());
// N(0, s^2) with s = gain / sqrt(fan_in); the default gain sqrt(2) suits ReLU.
Tensor kaiming_normal(const Shape& shape, DType dtype = DType::float32,
                      double gain = 1.4142135623730951, Generator& gen = default_generator());
// N(0, std^2) (GPT-2 initialises its weights with std 0.02). Throws "[init]" for std < 0.
Tensor normal_init(const Shape& shape, double std, DType dtype = DType::float32,
                   Generator& gen = default_generator());
// All zeros (any shape, including rank 0).
Tensor zeros_init(const Shape& shape, DType dtype = DType::float32);

// Dispatches on `kind` with the default gains (std 1 for normal). Throws "[init]" for non-floating
// dtypes.
Tensor initialize(Init kind, const Shape& shape, DType dtype = DType::float32,
                  Generator& gen = default_generator());

}  // namespace tide::nn
