// A module run under activation recomputation (ops/checkpoint.h): its forward keeps no
// intermediates for backward, which runs it again. GPT's blocks use it when
// GPTConfig::recompute is set. Not here: a wrapper module (it would rename the parameters).
#pragma once

#include <memory>

#include "nn/module.h"
#include "ops/checkpoint_options.h"

namespace tide::nn {

// m->forward(x) under tide::checkpoint, with m's parameters as its params, so that they get
// their gradients even when x requires none. The node keeps m alive until backward. Throws
// as tide::checkpoint and m->forward do; queued, waits for nothing. `options`: what the
// first run keeps instead of recomputing (default nothing).
Tensor checkpoint(const std::shared_ptr<Module>& m, const Tensor& x,
                  const CheckpointOptions& options = {});

}  // namespace tide::nn
