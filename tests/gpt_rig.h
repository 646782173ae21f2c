// A GPT with nanoGPT's optimizer side, for the suites that train one (tests/nn, tests/cuda):
// AdamW over decay groups (0.1 on the 2-D weights), betas (0.9, 0.99), the global-norm clip at
// 1.0 fused into the update, and a warmup-cosine schedule read from the step tensor.
#pragma once

#include <vector>

#include "nn/gpt.h"
#include "ops/ops.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace tide::test_util {

struct GptRig {
  // The model is made from `seed` and moved to `device` before the optimizer's state is.
  GptRig(const nn::GPTConfig& config, Device device, uint64_t seed,
         const WarmupCosineOptions& schedule)
      : gen(seed),
        model(config, gen),
        opt(train::decay_groups(moved(model, device), 0.1),
            train::AdamOptions(schedule.lr_).betas(0.9, 0.99)),
        sched(opt, schedule) {}

  // One training step: forward, loss, backward, clip, schedule, AdamW. Returns the loss.
  Tensor step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = model.loss(x, y);
    loss.backward();
    opt.clip_grad_norm(1.0);
    sched.step();
    opt.step();
    return loss.detach();
  }

  // Every parameter's values, in order, read back to the host (waits).
  std::vector<float> parameter_values() const {
    std::vector<float> out;
    for (const Tensor& p : model.parameters()) {
      std::vector<float> v = p.to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  Generator gen;
  nn::GPT model;
  train::AdamW opt;
  train::WarmupCosine sched;

 private:
  static nn::GPT& moved(nn::GPT& m, Device device) {
    m.to(device);
    return m;
  }
};

}  // namespace tide::test_util
