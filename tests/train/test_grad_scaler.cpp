// GradScaler and the optimizers' mixed-precision parts: a scaled step equals the unscaled one
// bit for bit (power-of-two scales are exact), a forced overflow skips the whole step on the
// device (parameters, state and the step count untouched) and backs the scale off, the scale
// grows after clean steps, clipping sees the unscaled norm, nothing waits, a traced scaled
// step equals eager through an overflow, and 16-bit parameters update through float32
// master copies.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "error_of.h"
#include "tests/train_rig.h"
#include "tide.h"
#include "train/grad_scaler.h"
#include "train/optimizer.h"

using namespace tide;
using namespace tide::train;

namespace {

const std::vector<double> kW0 = {1.0, -2.0, 0.5};

Tensor make_w(DType dt = DType::float32) {
  Tensor w = from_data(kW0, Shape{3}, dt);
  w.requires_grad_();
  return w;
}

// loss = sum(c * w²) / 2 + sum(x * w): the gradient c*w + x depends on w.
Tensor loss_of(const Tensor& w, const Tensor& x) {
  Tensor c = from_data({0.5, -1.5, 2.0}, Shape{3});
  return add(div(sum(mul(mul(c, w), w)), 2.0), sum(mul(x, w)));
}

Tensor clean_x() { return from_data({0.25, -0.5, 1.0}, Shape{3}); }
// Scaled by 65536 the loss and the gradient overflow float32.
Tensor overflow_x() { return from_data({1e35, 0.0, 0.0}, Shape{3}); }

float scalar(const Tensor& t) { return t.item<float>(); }

}  // namespace

TEST(GradScaler, RefusesBadOptionsAndLosses) {
  EXPECT_TIDE_ERROR(GradScaler(Device::cpu(), GradScalerOptions().init_scale(0)), "[grad_scaler]",
                    "init_scale");
  EXPECT_TIDE_ERROR(GradScaler(Device::cpu(), GradScalerOptions().growth_factor(1)),
                    "[grad_scaler]", "growth_factor");
  EXPECT_TIDE_ERROR(GradScaler(Device::cpu(), GradScalerOptions().backoff_factor(1)),
                    "[grad_scaler]", "backoff_factor");
  EXPECT_TIDE_ERROR(GradScaler(Device::cpu(), GradScalerOptions().growth_interval(0)),
                    "[grad_scaler]", "growth_interval");
  GradScaler scaler;
  EXPECT_TIDE_ERROR(scaler.scale(zeros({}, DType::float64)), "[grad_scaler]", "float32", "float64");
  EXPECT_EQ(scalar(scaler.scale(full({}, 3.0))), 3.0f * 65536.0f);
  GradScaler off(Device::cpu(), GradScalerOptions().enabled(false));
  EXPECT_EQ(scalar(off.scale(full({}, 3.0))), 3.0f);
}

// Only float16 needs a scaler; without one the helpers are the plain calls.
TEST(GradScaler, ScalerForAutocastAndTheHelpers) {
  EXPECT_EQ(scaler_for(std::nullopt, Device::cpu()), nullptr);
  EXPECT_EQ(scaler_for(DType::bfloat16, Device::cpu()), nullptr);
  std::unique_ptr<GradScaler> s = scaler_for(DType::float16, Device::cpu());
  ASSERT_NE(s, nullptr);
  Tensor a = make_w(), b = make_w();
  SGD plain({a}, SGDOptions(0.1)), scaled({b}, SGDOptions(0.1));
  scaled_backward(loss_of(a, clean_x()), nullptr);
  scaled_step(plain, nullptr);
  scaled_backward(loss_of(b, overflow_x()), s.get());  // skipped, the scale backs off
  scaled_step(scaled, s.get());
  EXPECT_NE(a.to_vector<float>(), make_w().to_vector<float>());
  EXPECT_EQ(b.to_vector<float>(), make_w().to_vector<float>());
  EXPECT_EQ(scalar(s->scale_tensor()), 32768.0f);
}

TEST(GradScaler, CleanStepsEqualUnscaledStepsBitwiseAndTheScaleGrows) {
  Tensor a = make_w(), b = make_w();
  SGD plain({a}, SGDOptions(0.1).momentum(0.9));
  SGD scaled({b}, SGDOptions(0.1).momentum(0.9));
  GradScaler scaler(Device::cpu(), GradScalerOptions().growth_interval(2));
  for (int s = 0; s < 3; ++s) {
    plain.zero_grad();
    loss_of(a, clean_x()).backward();
    plain.step();
    scaled.zero_grad();
    scaler.scale(loss_of(b, clean_x())).backward();
    scaler.step(scaled);
    scaler.update();
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << "step " << s;
  }
  // Two clean steps doubled the scale; the third counts one.
  EXPECT_EQ(scalar(scaler.scale_tensor()), 131072.0f);
  EXPECT_EQ(scalar(scaler.growth_tracker()), 1.0f);
  EXPECT_EQ(scalar(scaler.found_inf()), 0.0f);
}

// The overflow skips Adam's whole step (t stays 0), the scale halves, and the next clean step
// is bit for bit a first Adam step: zeroed state updates as fresh state does.
TEST(GradScaler, AnOverflowSkipsTheStepOnTheDeviceAndBacksOff) {
  Tensor a = make_w(), b = make_w();
  Adam plain({a}, AdamOptions(0.1));
  Adam scaled({b}, AdamOptions(0.1));
  GradScaler scaler;
  scaler.scale(loss_of(b, overflow_x())).backward();
  scaler.step(scaled);
  scaler.update();
  EXPECT_EQ(b.to_vector<float>(), make_w().to_vector<float>()) << "the step was not skipped";
  EXPECT_EQ(scaled.step_tensor().item<int64_t>(), 0);
  EXPECT_EQ(scalar(scaler.scale_tensor()), 32768.0f);
  EXPECT_EQ(scalar(scaler.found_inf()), 1.0f);
  EXPECT_EQ(scalar(scaler.growth_tracker()), 0.0f);

  scaled.zero_grad();
  scaler.scale(loss_of(b, clean_x())).backward();
  scaler.step(scaled);
  scaler.update();
  loss_of(a, clean_x()).backward();
  plain.step();
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(scaled.step_tensor().item<int64_t>(), 1);
  EXPECT_EQ(scalar(scaler.found_inf()), 0.0f);
}

// unscale_ then clip: the norm is the unscaled gradients' and the step equals a plain clipped
// step bit for bit; a second unscale_ in one step is refused.
TEST(GradScaler, ClippingAfterUnscaleSeesTheUnscaledNorm) {
  Tensor a = make_w(), b = make_w();
  SGD plain({a}, SGDOptions(0.1));
  SGD scaled({b}, SGDOptions(0.1));
  GradScaler scaler;
  loss_of(a, clean_x()).backward();
  Tensor na = plain.clip_grad_norm(0.5);
  plain.step();
  scaler.scale(loss_of(b, clean_x())).backward();
  scaler.unscale_(scaled);
  EXPECT_TIDE_ERROR(scaler.unscale_(scaled), "[grad_scaler]", "already", "sgd");
  Tensor nb = scaled.clip_grad_norm(0.5);
  scaler.step(scaled);  // unscaled already: not again
  scaler.update();
  EXPECT_EQ(scalar(na), scalar(nb));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

// Everything a scaled step calls queues and returns while the worker is held by a gate.
TEST(GradScaler, AScaledStepNeverWaits) {
  SynchronousGuard async(false);  // the gate must run on the worker
  Tensor w = make_w();
  Adam opt({w}, AdamOptions(0.1));
  GradScaler scaler;
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    ASSERT_TRUE(test_util::queues_without_waiting([&] {
      scaler.scale(loss_of(w, s == 0 ? overflow_x() : clean_x())).backward();
      scaler.unscale_(opt);
      opt.clip_grad_norm(1.0);
      scaler.step(opt);
      scaler.update();
    })) << "a call waited for queued work (step "
        << s << ")";
  }
  EXPECT_EQ(opt.step_tensor().item<int64_t>(), 1);  // the overflowing step was skipped
}

// The skip and the scale's update are device ops: a replayed traced step takes them, an
// overflow in the middle included, and equals the eager run bit for bit.
TEST(GradScaler, ATracedScaledStepEqualsEagerThroughAnOverflow) {
  Tensor a = make_w(), b = make_w();
  Adam eager_opt({a}, AdamOptions(0.1));
  Adam traced_opt({b}, AdamOptions(0.1));
  GradScaler eager_scaler(Device::cpu(), GradScalerOptions().growth_interval(2));
  GradScaler traced_scaler(Device::cpu(), GradScalerOptions().growth_interval(2));
  auto run = [](Tensor& w, Adam& opt, GradScaler& scaler, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = loss_of(w, x);
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    opt.clip_grad_norm(10.0);
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  // The first call runs eagerly (fresh state); the second traces; the rest replay.
  auto step = trace::function([&](const Tensor& x) { return run(b, traced_opt, traced_scaler, x); },
                              {.name = "scaled_step", .warmup_calls = 1});
  for (int s = 0; s < 7; ++s) {
    Tensor x = s == 4 ? overflow_x() : clean_x();
    run(a, eager_opt, eager_scaler, x);
    step(x);
    ASSERT_EQ(a.to_vector<float>(), b.to_vector<float>()) << "step " << s;
    ASSERT_EQ(scalar(eager_scaler.scale_tensor()), scalar(traced_scaler.scale_tensor()))
        << "step " << s;
  }
  EXPECT_EQ(traced_opt.step_tensor().item<int64_t>(), 6);
  EXPECT_EQ(scalar(traced_scaler.found_inf()), 0.0f);
}

// A bfloat16 parameter moves by steps far below its spacing: the float32 master copy keeps
// them (a bfloat16 update of 1 - 0.001 rounds back to 1), and the parameter is the master
// rounded. Adam's state is float32.
TEST(MasterWeights, SixteenBitParametersUpdateThroughFloat32Masters) {
  for (DType dt : {DType::bfloat16, DType::float16}) {
    Tensor w = from_data({1.0, -1.0}, Shape{2}, dt);
    w.requires_grad_();
    w.backward(full({2}, 1.0, dt));  // a leaf's gradient: ones
    SGD opt({w}, SGDOptions(0.001));
    EXPECT_EQ(opt.state_dtype(), DType::float32);
    EXPECT_EQ(opt.lr_tensor().dtype(), DType::float32);
    for (int s = 0; s < 10; ++s) opt.step();
    ASSERT_TRUE(opt.master(0).defined());
    std::vector<float> master = opt.master(0).to_vector<float>();
    float want = 1.0f;
    for (int s = 0; s < 10; ++s) want = want - 1.0f * 0.001f;
    EXPECT_NEAR(master[0], want, 1e-6) << dt;
    EXPECT_EQ(w.to_vector<float>(), cast(opt.master(0), dt).to_vector<float>()) << dt;
    EXPECT_LT(w.to_vector<float>()[0], 1.0f) << dt << ": the steps were lost";
  }
  Tensor p = from_data({0.5, 0.25}, Shape{2}, DType::bfloat16);
  p.requires_grad_();
  p.backward(full({2}, 1.0, DType::bfloat16));
  Adam adam({p}, AdamOptions(0.01));
  adam.step();
  EXPECT_EQ(adam.master(0).dtype(), DType::float32);
  EXPECT_EQ(adam.step_tensor().item<int64_t>(), 1);
  EXPECT_NE(p.to_vector<float>()[0], 0.5f);
}
