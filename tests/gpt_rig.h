// A GPT with nanoGPT's optimizer side, for the suites that train one (tests/nn, tests/cuda):
// AdamW over decay groups (0.1 on the 2-D weights), betas (0.9, 0.99), the global-norm clip at
// 1.0 fused into the update, and a warmup-cosine schedule read from the step tensor.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "nn/gpt.h"
#include "ops/ops.h"
#include "trace/function.h"
#include "train/grad_scaler.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace tide::test_util {

// The tiny model of tests/nn/gen_gpt_parity.py: vocabulary 11, context 8, 2 layers, 2 heads,
// width 16.
inline nn::GPTConfig tiny_gpt_config(DType dtype) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dtype = dtype;
  return c;
}

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
  // With `autocast` set, the forward and loss run under Autocast(*autocast), and float16
  // scales the loss with `scaler` (made by use_autocast).
  Tensor step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<Autocast> amp;
      if (autocast) amp.emplace(*autocast);
      loss = model.loss(x, y);
    }
    train::scaled_backward(loss, scaler.get());
    if (scaler) scaler->unscale_(opt);
    opt.clip_grad_norm(1.0);
    sched.step();
    train::scaled_step(opt, scaler.get());
    return loss.detach();
  }
  // Mixed precision for step(): nullopt (float32), bfloat16 or float16 (with a GradScaler).
  void use_autocast(std::optional<DType> low, Device device) {
    autocast = low;
    scaler = train::scaler_for(low, device);
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
  std::optional<DType> autocast;
  std::unique_ptr<train::GradScaler> scaler;

 private:
  static nn::GPT& moved(nn::GPT& m, Device device) {
    m.to(device);
    return m;
  }
};

// What run_gpt_steps saw: each step's loss, the parameters after the last step, and the
// traced function's statistics (all zero for an eager run).
struct GptSteps {
  std::vector<float> losses, params;
  trace::FunctionStats stats;
};

// `steps` training steps of a fresh GptRig(config, device, seed, schedule), step i on the
// batch batch(i), eager or traced (trace::function, one warm-up call), in float32 or under
// `autocast`. Reads each loss.
inline GptSteps run_gpt_steps(const nn::GPTConfig& config, Device device, uint64_t seed,
                              const WarmupCosineOptions& schedule, int steps, bool traced,
                              const std::function<std::pair<Tensor, Tensor>(int)>& batch,
                              std::optional<DType> autocast = std::nullopt) {
  GptRig rig(config, device, seed, schedule);
  rig.use_autocast(autocast, device);
  auto step = [&](const Tensor& x, const Tensor& y) { return rig.step(x, y); };
  auto traced_step = trace::function(step, {.name = "gpt_step", .warmup_calls = 1});
  GptSteps out;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = batch(i);
    out.losses.push_back((traced ? traced_step(x, y) : step(x, y)).item<float>());
  }
  if (traced) out.stats = traced_step.stats();
  out.params = rig.parameter_values();
  return out;
}

// The same two windows of six tokens every step, for the tiny model.
inline std::pair<Tensor, Tensor> fixed_tiny_batch(Device device) {
  return {from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1}, {2, 6}, device),
          from_vector<int64_t>({2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2}, {2, 6}, device)};
}

}  // namespace tide::test_util
