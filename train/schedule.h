// Learning-rate schedules computed on the device: each step() queues one op that reads the
// optimizer's step count (Optimizer::step_tensor()) when it runs and writes the learning rate
// into lr_tensor(), which the updates read after it. Nothing is read on the host and no
// kernel argument changes from step to step, so a traced step that calls step() follows the
// schedule on every replay without retracing (docs/contributing.md, Values that change between
// replays). Not done: other shapes of schedule (step, exponential, one-cycle), per-group rates.
#pragma once

#include <cstdint>

#include "ops/optim.h"
#include "train/optimizer.h"

namespace tide::train {

// nanoGPT's get_lr: at iteration it (the optimizer's steps taken, 0 for the first), a linear
// warmup lr * (it + 1) / (warmup + 1) while it < warmup, then a cosine from lr down to min_lr
// over [warmup, decay_steps], and min_lr from decay_steps on. Call step() before each
// optimizer.step() (inside the traced step function, when there is one):
//
//   train::AdamW opt(train::decay_groups(model, 0.1), train::AdamOptions(6e-4).betas(0.9, 0.95));
//   train::WarmupCosine sched(opt, WarmupCosineOptions{6e-4, 6e-5, 2000, 600000});
//   ... loss.backward(); sched.step(); opt.step();
class WarmupCosine {
 public:
  // Keeps a reference to `optimizer`, which must outlive this. Makes the optimizer's step
  // tensor if it has none yet (SGD), so build the schedule before tracing a step. Throws
  // "[warmup_cosine_lr_]" for options other than finite 0 <= min_lr <= lr and
  // 0 <= warmup <= decay_steps. Does not wait.
  WarmupCosine(Optimizer& optimizer, const WarmupCosineOptions& options);

  // Queues lr_tensor() = lr_at(step_tensor()): the learning rate of the optimizer's next
  // step. Does not wait.
  void step();

  // The schedule on the host, in double (the device computes the same in double and rounds
  // it to the parameters' dtype): for logging, and for tests.
  double lr_at(int64_t it) const;
  const WarmupCosineOptions& options() const { return opt_; }

 private:
  Optimizer& optimizer_;
  WarmupCosineOptions opt_;
};

}  // namespace tide::train
