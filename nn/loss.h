// Losses. All return a 0-d tensor, are differentiable through ordinary ops, and are queued
// (none waits). Errors name the loss and the shapes: "[cross_entropy] ...".
#pragma once

#include "core/tensor.h"

namespace tide::nn {

// mean(0.5 * (pred - target)^2), Gluon's L2Loss (the textbook's). As in Gluon, a target
// with the same number of elements is reshaped to pred's shape first, so (N) targets work
// with (N, 1) predictions instead of silently broadcasting to (N, N). Throws "[l2_loss]"
// when the element counts or dtypes differ.
Tensor l2_loss(const Tensor& pred, const Tensor& target);
// mean((pred - target)^2); the same shape rule, "[mse_loss]".
Tensor mse_loss(const Tensor& pred, const Tensor& target);

// Mean over rows of -log_softmax(logits)[label]. logits: (N, C) float32/float64, N >= 1;
// labels: (N) int64 (int32 is accepted and widened). Numerically stable for large logits.
// A label outside [0, C) cannot be checked without waiting: its row contributes 0.
// Throws "[cross_entropy]" naming the shapes/dtypes on bad ranks, sizes or dtypes.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);

}  // namespace tide::nn
