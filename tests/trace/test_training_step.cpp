// The whole training step traced: forward, loss, backward and the optimizer update
// captured once and replayed, also with a gradient clip and a learning-rate schedule.
// Parameters after 20 steps equal eager's bit for bit.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/error_of.h"
#include "tests/train_rig.h"
#include "trace/planner.h"
#include "trace/trace.h"
#include "trace_support.h"
#include "train/optimizer.h"

namespace tide {
namespace {

using testing::bitwise_equal;

using test_util::TrainRig;

TrainRig make_run(bool adam) {
  return test_util::make_rig({.sizes = {12, 32, 16, 1},
                              .adam = adam,
                              .lr = adam ? 0.01 : 0.05,
                              .momentum = 0.9,
                              .tanh_after = 1});
}

Tensor step(TrainRig& r, const Tensor& x, const Tensor& y) {
  return test_util::train_step(r, x, y);
}

void check_twenty_steps(bool adam) {
  TrainRig eager = make_run(adam), traced = make_run(adam);
  // Momentum / moment buffers are created on the first step: one eager warm-up call.
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return step(traced, x, y); },
                           {.name = "train_step", .warmup_calls = 1});
  Generator data(3);
  for (int i = 0; i < 20; ++i) {
    Tensor x = randn({24, 12}, DType::float32, data), y = randn({24, 1}, DType::float32, data);
    Tensor le = step(eager, x, y), lt = f(x, y);
    ASSERT_TRUE(bitwise_equal(le, lt)) << "loss at step " << i;
  }
  auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
  ASSERT_EQ(pe.size(), pt.size());
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_TRUE(bitwise_equal(pe[i].second, pt[i].second)) << pe[i].first;
  auto s = f.stats();
  EXPECT_EQ(s.eager_calls, 1);
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.replays, 19);
  EXPECT_GT(s.recorded_ops, 30);
}

TEST(TraceTrainingStep, SgdMomentumTwentyStepsBitwise) { check_twenty_steps(false); }
TEST(TraceTrainingStep, AdamTwentyStepsBitwise) { check_twenty_steps(true); }

// nanoGPT's step traced: parameter groups, the global-norm clip (fused into the update, or
// PyTorch's in-place clip_grad_norm_) and the warmup-cosine schedule read from the step
// tensor. Twenty calls (warmup, cosine and the floor of the schedule) trace once and replay
// the rest; every loss, norm and learning rate, and the parameters at the end, equal eager's
// bit for bit. Nothing in the step reads a value on the host: a trace refuses host reads.
void check_clipped_steps(bool adam, bool fused) {
  SCOPED_TRACE(std::string(adam ? "adamw" : "sgd") +
               (fused ? ", fused clip" : ", clip_grad_norm_"));
  test_util::RigOptions o{.sizes = {12, 32, 16, 1}, .adam = adam, .momentum = 0.9, .tanh_after = 1};
  test_util::ClipOptions c{.max_norm = 1.0, .fused = fused};
  TrainRig eager = test_util::make_clipped_rig(o, c), traced = test_util::make_clipped_rig(o, c);
  auto f = trace::function(
      [&](const Tensor& x, const Tensor& y) { return test_util::clipped_step(traced, x, y); },
      {.name = "clipped_step", .warmup_calls = 1});
  Generator data(5);
  int clipped = 0;
  for (int i = 0; i < 20; ++i) {
    Tensor x = randn({24, 12}, DType::float32, data), y = randn({24, 1}, DType::float32, data);
    std::vector<Tensor> e = test_util::clipped_step(eager, x, y), t = f(x, y);
    ASSERT_EQ(t.size(), 2u);
    ASSERT_TRUE(bitwise_equal(e[0], t[0])) << "loss at step " << i;
    ASSERT_TRUE(bitwise_equal(e[1], t[1])) << "norm at step " << i;
    ASSERT_TRUE(bitwise_equal(eager.opt->lr_tensor(), traced.opt->lr_tensor()))
        << "lr at step " << i;
    EXPECT_FLOAT_EQ(traced.opt->lr_tensor().item<float>(), float(traced.schedule->lr_at(i)))
        << "step " << i;
    clipped += e[1].item<float>() > c.max_norm;
  }
  EXPECT_GT(clipped, 0) << "no step clipped: max_norm too large to test the clip";
  EXPECT_LT(clipped, 20) << "every step clipped: max_norm too small to test the unclipped case";
  auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
  ASSERT_EQ(pe.size(), pt.size());
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_TRUE(bitwise_equal(pe[i].second, pt[i].second)) << pe[i].first;
  auto s = f.stats();
  EXPECT_EQ(s.eager_calls, 1);
  EXPECT_EQ(s.traces, 1) << "the schedule and the clip must not retrace";
  EXPECT_EQ(s.replays, 19);
}

TEST(TraceTrainingStep, ClippedScheduledAdamWBitwiseWithoutRetracing) {
  check_clipped_steps(true, true);
  check_clipped_steps(true, false);
}
TEST(TraceTrainingStep, ClippedScheduledSgdBitwiseWithoutRetracing) {
  check_clipped_steps(false, true);
  check_clipped_steps(false, false);
}

TEST(TraceTrainingStep, PlannedPeakIsBelowEagerPeak) {
  TrainRig r = make_run(false);
  Tensor x = randn({256, 12}), y = randn({256, 1});
  step(r, x, y).wait_to_read();  // warm-up: buffers exist
  wait_all();
  Allocator& a = Allocator::get();
  size_t base = a.stats().active_bytes;
  a.reset_peak();
  {
    SynchronousGuard sync;  // one op at a time: the eager peak of one step
    step(r, x, y).wait_to_read();
  }
  size_t eager_peak = a.stats().peak_bytes - base;
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return step(r, x, y); });
  f(x, y).wait_to_read();
  auto s = f.stats();
  auto g = f.graph(x, y);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(trace::check_plan(*g), "");
  EXPECT_LE(s.arena_bytes + s.output_bytes, eager_peak);
  EXPECT_LT(s.arena_bytes, s.unplanned_bytes);
  // A replay allocates only its output (the loss).
  wait_all();
  uint64_t allocs = a.stats().num_allocs;
  f(x, y).wait_to_read();
  wait_all();
  EXPECT_EQ(a.stats().num_allocs - allocs, 1u);
}

// A function that runs backward but leaves zero_grad to its caller (PyTorch's habit:
// zero_grad, f(x), then the optimizer): each call's gradient is the parameter's .grad
// afterwards, as eager's is, though the caller reset it since the trace.
TEST(TraceTrainingStep, GradientsAreTheLeavesAfterEveryCallWhenTheCallerResetsThem) {
  Tensor w = full({2}, 2.0), we = full({2}, 2.0);
  w.requires_grad_();
  we.requires_grad_();
  auto loss_of = [](Tensor& p) {
    return [&p](const Tensor& x) {
      Tensor loss = sum(x * p * p);
      loss.backward();
      return loss;
    };
  };
  auto f = trace::function(loss_of(w));
  auto eager = loss_of(we);
  for (int call = 0; call < 4; ++call) {
    Tensor x = from_vector<float>({1, float(call)}, Shape({2}));
    w.zero_grad();
    we.zero_grad();
    f(x);
    eager(x);
    ASSERT_TRUE(w.grad().defined()) << call;
    EXPECT_EQ(w.grad().to_vector<float>(), we.grad().to_vector<float>()) << call;
  }
}

// Gradients that eager would treat otherwise than the recording did are refused at the
// call, before anything runs: accumulating over calls into a gradient the trace made, and
// a gradient the trace adds to, reset since.
TEST(TraceTrainingStep, GradientsEagerWouldTreatOtherwiseAreRefused) {
  Tensor w = full({2}, 2.0);
  w.requires_grad_();
  auto f = trace::function(
      [&](const Tensor& x) {
        Tensor loss = sum(x * w);
        loss.backward();
        return loss;
      },
      {.name = "no_reset"});
  Tensor x = full({2}, 3.0);
  f(x);
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(2, 3.0f));
  std::string e = test_util::error_of([&] { f(x); });
  EXPECT_NE(e.find("trace::function 'no_reset': the gradient of a parameter of shape (2,)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("eager would add this call's gradient"), std::string::npos) << e;
  EXPECT_NE(e.find("zero_grad()"), std::string::npos) << e;
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(2, 3.0f)) << "nothing ran";
  EXPECT_EQ(f.stats().calls, 1);
  w.zero_grad();
  EXPECT_EQ(f(x).item<float>(), 12.0f) << "with the gradient reset, as at the trace";

  // Traced while w had a gradient: the replays add to that one.
  Tensor v = full({2}, 1.0);
  v.requires_grad_();
  sum(v * 1.0).backward();
  auto g = trace::function([&](const Tensor& x) { sum(x * v).backward(); }, {.name = "adds"});
  g(x);
  g(x);
  EXPECT_EQ(v.grad().to_vector<float>(), std::vector<float>(2, 7.0f)) << "1 + 3 + 3, as eager";
  v.zero_grad();
  e = test_util::error_of([&] { g(x); });
  EXPECT_NE(e.find("eager would make a new gradient"), std::string::npos) << e;
}

TEST(TraceTrainingStep, FreshGradientsBecomeTheGradsWithoutCopies) {
  // A parameter's first gradient becomes its .grad as it is (ops/autograd.cpp), also while
  // a trace records: the traced step has no copy node, and records as many ops as the
  // eager step queues.
  TrainRig r = make_run(false);
  Tensor x = randn({24, 12}), y = randn({24, 1});
  step(r, x, y).wait_to_read();  // warm-up: momentum buffers exist
  wait_all();
  uint64_t before = Engine::get().stats().queued;
  step(r, x, y);
  uint64_t eager_ops = Engine::get().stats().queued - before;
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return step(r, x, y); });
  f(x, y).wait_to_read();
  auto g = f.graph(x, y);
  ASSERT_NE(g, nullptr);
  for (const trace::Node& n : g->nodes) EXPECT_STRNE(n.op, op_name(OpId::clone));
  EXPECT_EQ(uint64_t(f.stats().recorded_ops), eager_ops);
}

TEST(TraceTrainingStep, AGradientTwoParametersShareIsCopiedInATraceToo) {
  // add hands one gradient to both parameters: taken for both, a and b would share one
  // .grad and the second backward would add into it twice.
  Tensor a = from_data({1, 2}, {2}).requires_grad_(), b = from_data({3, 4}, {2}).requires_grad_();
  auto f = trace::function([&](const Tensor& x) {
    a.zero_grad();
    b.zero_grad();
    Tensor loss = sum(mul(add(a, b), x));
    loss.backward();
    sum(mul(add(a, b), x)).backward();
    return loss;
  });
  Tensor x = from_data({1, 1}, {2});
  for (int call = 0; call < 3; ++call) {
    f(x).wait_to_read();
    EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 2})) << "call " << call;
    EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2})) << "call " << call;
  }
}

}  // namespace
}  // namespace tide
