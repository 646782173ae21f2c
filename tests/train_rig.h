// A model with its optimizer and the whole training step (forward, L2 loss, backward,
// update; or with a gradient clip and a learning-rate schedule), for the suites that check
// traced training steps against eager on each device (tests/trace, tests/cuda).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "nn/nn.h"
#include "ops/creation.h"
#include "ops/debug.h"
#include "train/clip.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace tide::test_util {

// Runs `queue` with the worker held by a gate queued first, then opens the gate and waits for
// everything: true when `queue` returned without waiting for queued work. Had a call waited,
// it would have waited for the gate, whose body gives up after 20 s: false, not a hang. Needs
// the asynchronous engine (SynchronousGuard(false)).
inline bool queues_without_waiting(const std::function<void()>& queue) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> timed_out{false};
  Tensor hold = tide::zeros({1});
  debug::gate(hold, [&] {
    if (released.wait_for(std::chrono::seconds(20)) != std::future_status::ready) timed_out = true;
  });
  queue();
  release.set_value();
  wait_all();
  return !timed_out;
}

struct TrainRig {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<train::Optimizer> opt;
  // GPT-style steps (make_clipped_rig, clipped_step): the schedule stepped before each
  // update, and the gradients' global norm clipped to max_norm.
  std::unique_ptr<train::WarmupCosine> schedule;
  double max_norm = 0;
  bool fused_clip = false;
};

struct RigOptions {
  std::vector<int64_t> sizes;  // features in, hidden..., out
  Device device = Device::cpu();
  bool adam = false;  // else SGD
  double lr = 0.05;
  double momentum = 0;  // SGD only
  uint64_t seed = 11;
  int tanh_after = -1;  // the hidden layer followed by Tanh instead of ReLU
  double dropout = 0;   // > 0: Dropout(dropout, *dropout_gen) after each activation
  Generator* dropout_gen = nullptr;
};

// Linear layers of o.sizes with an activation after each but the last, initialised from
// Generator(o.seed) in layer order, moved to o.device before the optimizer is built.
inline TrainRig make_rig(const RigOptions& o) {
  Generator gen(o.seed);
  TrainRig r;
  r.model = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < o.sizes.size(); ++i) {
    r.model->push_back(
        std::make_shared<nn::Linear>(nn::LinearOptions(o.sizes[i], o.sizes[i + 1]), gen));
    if (i + 2 < o.sizes.size()) {
      if (int(i) == o.tanh_after) r.model->push_back(std::make_shared<nn::Tanh>());
      else r.model->push_back(std::make_shared<nn::ReLU>());
      if (o.dropout > 0)
        r.model->push_back(std::make_shared<nn::Dropout>(o.dropout, *o.dropout_gen));
    }
  }
  r.model->to(o.device);
  if (o.adam)
    r.opt = std::make_unique<train::Adam>(r.model->parameters(), train::AdamOptions(o.lr));
  else
    r.opt = std::make_unique<train::SGD>(r.model->parameters(),
                                         train::SGDOptions(o.lr).momentum(o.momentum));
  return r;
}

inline Tensor train_step(TrainRig& r, const Tensor& x, const Tensor& y) {
  r.opt->zero_grad();
  Tensor loss = nn::l2_loss(r.model->forward(x), y);
  loss.backward();
  r.opt->step();
  return loss;
}

struct ClipOptions {
  double max_norm = 1.0;
  bool fused = true;          // Optimizer::clip_grad_norm, else train::clip_grad_norm_
  double weight_decay = 0.1;  // of the dim >= 2 group (train::decay_groups)
  WarmupCosineOptions schedule = WarmupCosineOptions{0.02, 0.002, 3, 12};
};

// nanoGPT's optimizer on make_rig(o)'s model: AdamW (o.adam) or SGD with o.momentum over
// decay_groups(model, c.weight_decay), a WarmupCosine schedule, and the gradients clipped
// to c.max_norm in every step (clipped_step).
inline TrainRig make_clipped_rig(const RigOptions& o, const ClipOptions& c) {
  TrainRig r = make_rig(o);
  std::vector<train::ParamGroup> groups = train::decay_groups(*r.model, c.weight_decay);
  if (o.adam) r.opt = std::make_unique<train::AdamW>(groups, train::AdamOptions(c.schedule.lr_));
  else
    r.opt = std::make_unique<train::SGD>(groups,
                                         train::SGDOptions(c.schedule.lr_).momentum(o.momentum));
  r.schedule = std::make_unique<train::WarmupCosine>(*r.opt, c.schedule);
  r.max_norm = c.max_norm;
  r.fused_clip = c.fused;
  return r;
}

// One GPT-style step: zero_grad, forward, L2 loss, backward, the clip, the schedule, the
// update. Returns {loss, the gradients' norm before clipping}.
inline std::vector<Tensor> clipped_step(TrainRig& r, const Tensor& x, const Tensor& y) {
  r.opt->zero_grad();
  Tensor loss = nn::l2_loss(r.model->forward(x), y);
  loss.backward();
  Tensor norm = r.fused_clip ? r.opt->clip_grad_norm(r.max_norm)
                             : train::clip_grad_norm_(r.opt->params(), r.max_norm);
  r.schedule->step();
  r.opt->step();
  return {loss, norm};
}

}  // namespace tide::test_util
