// trace::Options::memory_budget (trace/remat.h): over the budget the planner recomputes a
// cheap elementwise activation before its later use instead of keeping it; the plan shrinks,
// stays sound (check_plan), and the replays equal eager bit for bit, a GPT training step
// included. Nothing qualifies: the report says the budget is not met. A graph that runs
// nodes at once is left alone.
#include <gtest/gtest.h>

#include <vector>

#include "ops/ops.h"
#include "tests/gpt_rig.h"
#include "trace/planner.h"
#include "trace/trace.h"

namespace tide {
namespace {

// `a` is made first and used last; the temporaries in between are the peak, where `a` is
// idle: recomputing exp(x) there saves its bytes.
Tensor kept_across(const Tensor& x) {
  Tensor a = exp(x);
  Tensor t = mul(x, 2.0);
  Tensor u = add(t, 1.0);
  Tensor w = mul(u, u);
  Tensor v = sub(w, t);
  return add(mul(a, 3.0), v);
}

trace::MemoryPlan unbudgeted_plan(const Tensor& x) {
  auto f = trace::function(kept_across, {.name = "plain"});
  return f.memory_plan(x);
}

TEST(MemoryBudget, RecomputesAnIdleActivationAndEqualsEager) {
  const Tensor x = randn({4096});
  const trace::MemoryPlan plain = unbudgeted_plan(x);
  auto f = trace::function(kept_across, {.name = "budgeted", .memory_budget = plain.peak() - 1});
  const trace::MemoryPlan planned = f.memory_plan(x);
  const trace::FunctionStats st = f.stats();
  ASSERT_TRUE(st.remat.applied);
  EXPECT_GE(st.remat.recomputed, 1);
  EXPECT_EQ(st.remat.ops.front(), std::string("exp"));
  EXPECT_EQ(st.remat.peak_before, plain.peak());
  EXPECT_EQ(st.remat.peak_after, planned.peak());
  EXPECT_LT(planned.arena, plain.arena);
  EXPECT_TRUE(st.remat.met()) << st.remat.str();
  EXPECT_NE(st.remat.str().find("recomputed"), std::string::npos);
  EXPECT_EQ(trace::check_plan(*f.graph(x)), "");
  for (int i = 0; i < 3; ++i) {
    const Tensor xi = randn({4096});
    EXPECT_EQ(f(xi).to_vector<float>(), kept_across(xi).to_vector<float>()) << "call " << i;
  }
}

// A budget no recomputation can meet: the plan keeps what it found and says so.
TEST(MemoryBudget, AnUnreachableBudgetIsReportedNotMet) {
  const Tensor x = randn({4096});
  auto f = trace::function(kept_across, {.name = "tiny_budget", .memory_budget = 1});
  f.memory_plan(x);
  const trace::RematReport r = f.stats().remat;
  EXPECT_FALSE(r.met());
  EXPECT_NE(r.str().find("not met"), std::string::npos);
  EXPECT_EQ(f(x).to_vector<float>(), kept_across(x).to_vector<float>());
}

// Parallel branches run nodes at once: the budget is not applied.
TEST(MemoryBudget, ConcurrentGraphsAreLeftAlone) {
  const Tensor x = randn({4096});
  auto f = trace::function(kept_across, {.name = "parallel", .streams = 2, .memory_budget = 1});
  f.memory_plan(x);
  EXPECT_FALSE(f.stats().remat.applied);
  EXPECT_EQ(f.stats().remat.recomputed, 0);
  EXPECT_NE(f.stats().remat.str().find("not applied"), std::string::npos);
}

// A GPT training step under a budget below its plain plan: losses and parameters equal the
// eager run's bit for bit.
TEST(MemoryBudget, ABudgetedGptStepEqualsEager) {
  const nn::GPTConfig cfg = test_util::tiny_gpt_config(DType::float32);
  const WarmupCosineOptions sched{1e-2, 1e-3, 2, 10};
  auto batch = [](int) { return test_util::fixed_tiny_batch(Device::cpu()); };
  const test_util::GptSteps eager =
      test_util::run_gpt_steps(cfg, Device::cpu(), 7, sched, 5, false, batch);

  size_t plain_peak = 0;
  {
    test_util::GptRig rig(cfg, Device::cpu(), 7, sched);
    auto f = trace::function([&](const Tensor& x, const Tensor& y) { return rig.step(x, y); },
                             {.name = "gpt_plain", .warmup_calls = 1});
    auto [x, y] = batch(0);
    f(x, y);
    plain_peak = f.memory_plan(x, y).peak();
  }
  test_util::GptRig rig(cfg, Device::cpu(), 7, sched);
  auto f = trace::function(
      [&](const Tensor& x, const Tensor& y) { return rig.step(x, y); },
      {.name = "gpt_budget", .warmup_calls = 1, .memory_budget = plain_peak * 9 / 10});
  std::vector<float> losses;
  for (int i = 0; i < 5; ++i) {
    auto [x, y] = batch(i);
    losses.push_back(f(x, y).item<float>());
  }
  const trace::RematReport r = f.stats().remat;
  EXPECT_GT(r.recomputed, 0) << r.str();
  EXPECT_LT(r.peak_after, r.peak_before) << r.str();
  EXPECT_EQ(losses, eager.losses);
  EXPECT_EQ(rig.parameter_values(), eager.params);
  auto [x, y] = batch(0);
  EXPECT_EQ(trace::check_plan(*f.graph(x, y)), "");
}

}  // namespace
}  // namespace tide
