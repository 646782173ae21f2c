// Gradient clipping by the global L2 norm as queued ops: the norm and the clip factor are
// 0-d tensors on the gradients' device, and nothing here reads a value on the host, so a
// clipped step needs no sync and traces (trace::function) like any other step. The fused
// form, which leaves the gradients alone and lets the next update apply the factor, is
// Optimizer::clip_grad_norm (train/optimizer.h). Not done: norms other than L2, and
// PyTorch's error_if_nonfinite (that would need a host read).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tide::train {

// The L2 norm of all gradients of `params` together, as a 0-d tensor of their dtype on their
// device: sum(g * g) per gradient (summed in double inside one gradient), these sums added in
// the order of `params`, then sqrt; deterministic, as every reduction is. Parameters without
// a gradient are skipped; with none, the norm is 0. Queued; does not wait.
// Throws "[clip_grad_norm_]" for an undefined parameter, or gradients that differ in dtype
// or device.
Tensor grad_norm(const std::vector<Tensor>& params);

// PyTorch's clip factor min(1, max_norm / (norm + 1e-6)) for a 0-d floating norm, as a 0-d
// tensor like it (NaN for a NaN norm, 0 for an infinite one, as PyTorch's). Queued; does not
// wait. Throws "[clip_grad_norm_]" for a max_norm that is not > 0 or a norm that is not a
// 0-d floating tensor.
Tensor clip_scale(const Tensor& norm, double max_norm);

// PyTorch's torch.nn.utils.clip_grad_norm_: multiplies every gradient of `params` in place
// by clip_scale(grad_norm(params), max_norm) (queued mul_, under NoGrad) and returns the norm
// before clipping. Reading the norm (for logging) waits for it; nothing else does. Throws as
// grad_norm and clip_scale, before anything is queued.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace tide::train
