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
// labels: (N) int64 or int32 on the logits' device. Numerically stable for large logits.
// Throws "[cross_entropy]" naming the shapes/dtypes on bad ranks, sizes or dtypes.
// A label outside [0, C) is found without waiting, when the kernel runs: on the CPU the loss
// fails, and the first sync that touches it (or its gradients) throws "[cross_entropy]
// label 200 of row 3 is outside the 10 classes [0, 10)"; on a GPU the loss is NaN instead
// (train::Trainer stops on a loss that is not finite).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);

}  // namespace tide::nn
