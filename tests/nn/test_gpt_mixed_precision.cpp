// The GPT under autocast (ops/autocast.h): bfloat16 and float16 (with a GradScaler) training
// steps learn, stay close to float32, and the traced step equals the eager one bit for bit,
// on the CPU and the fake GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "fake_gpu.h"
#include "tests/gpt_rig.h"

namespace tide {
namespace {

const WarmupCosineOptions kSchedule{1e-2, 1e-3, 2, 12};

test_util::GptSteps run(Device d, bool traced, std::optional<DType> low) {
  return test_util::run_gpt_steps(
      test_util::tiny_gpt_config(DType::float32), d, 3, kSchedule, 8, traced,
      [d](int) { return test_util::fixed_tiny_batch(d); }, low);
}

void check(Device d, DType low) {
  SCOPED_TRACE(std::string(name(low)) + " on " + d.str());
  const test_util::GptSteps f32 = run(d, false, std::nullopt);
  const test_util::GptSteps eager = run(d, false, low);
  const test_util::GptSteps traced = run(d, true, low);
  EXPECT_EQ(traced.losses, eager.losses);
  EXPECT_EQ(traced.params, eager.params);
  EXPECT_EQ(traced.stats.replays, 7);  // the first call is the eager warm-up
  // It learns, and stays near float32 (the tiny model's losses differ by rounding only).
  EXPECT_LT(eager.losses.back(), eager.losses.front() - 0.5);
  for (size_t i = 0; i < f32.losses.size(); ++i)
    EXPECT_NEAR(eager.losses[i], f32.losses[i], 0.1) << "step " << i;
  EXPECT_NE(eager.losses, f32.losses) << "autocast changed nothing";
}

TEST(GPTMixedPrecision, Bfloat16TracedEqualsEagerAndLearns) {
  check(Device::cpu(), DType::bfloat16);
}

TEST(GPTMixedPrecision, Float16WithLossScalingTracedEqualsEagerAndLearns) {
  check(Device::cpu(), DType::float16);
}

TEST(GPTMixedPrecision, OnTheFakeGpu) {
  test_util::fake_gpu(8);
  check(Device::cuda(8), DType::bfloat16);
}

}  // namespace
}  // namespace tide
