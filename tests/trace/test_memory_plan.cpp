// trace::MemoryPlan (trace/memory_plan.h): a traced training step's memory by role before
// any replay runs: the plan names the parameters, the optimizer's state, the gradients, the
// arena and the per-replay arguments and outputs at their block sizes; planning runs
// nothing and the first call then replays without tracing again; the planned peak is what
// the replays measure; planning before the warm-up calls is refused.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "ops/ops.h"
#include "tests/error_of.h"
#include "tests/train_rig.h"
#include "trace/trace.h"

namespace tide {
namespace {

size_t blocks_of(const std::vector<Tensor>& ts) {
  size_t n = 0;
  for (const Tensor& t : ts) n += Allocator::round_size(t.nbytes());
  return n;
}

TEST(MemoryPlan, ATrainingStepByRoleBeforeItsFirstReplay) {
  test_util::TrainRig r = test_util::make_rig({.sizes = {64, 256, 256, 8}, .adam = true});
  const Tensor x = randn({128, 64}), y = randn({128, 8});
  auto step = trace::function(
      [&](const Tensor& a, const Tensor& b) { return test_util::train_step(r, a, b); },
      {.name = "planned_step", .warmup_calls = 1});
  step(x, y).item<float>();  // the warm-up: eager, makes Adam's moments
  const std::vector<Tensor> params = r.model->parameters();
  const trace::MemoryPlan plan = step.memory_plan(x, y);
  trace::FunctionStats st = step.stats();
  EXPECT_EQ(st.traces, 1);
  EXPECT_EQ(st.replays, 0) << "planning runs nothing";
  EXPECT_EQ(plan.parameters, blocks_of(params));
  // Adam's m and v per parameter, its step count and learning rate.
  EXPECT_EQ(plan.captured, 2 * blocks_of(params) + 2 * Allocator::round_size(8));
  EXPECT_EQ(plan.state, blocks_of(params)) << "the gradients the step takes";
  EXPECT_EQ(plan.inputs, blocks_of({x, y}));
  EXPECT_EQ(plan.outputs, Allocator::round_size(4));  // the loss
  EXPECT_EQ(plan.arena, Allocator::round_size(step.graph(x, y)->arena_bytes));
  EXPECT_GT(plan.arena, 0u);
  EXPECT_EQ(plan.peak(), plan.parameters + plan.captured + plan.state + plan.constants +
                             plan.arena + plan.inputs + plan.outputs);
  EXPECT_NE(plan.str().find("arena"), std::string::npos);

  // The replays use that graph, and hold what it planned: the allocator's active bytes
  // while they run (each waited for) stay within 5 % of the planned peak.
  wait_all();
  Engine::get().reclaim();
  Allocator& al = Allocator::get();
  al.reset_peak();
  for (int i = 0; i < 4; ++i) step(x, y).item<float>();
  wait_all();
  st = step.stats();
  EXPECT_EQ(st.traces, 1);
  EXPECT_EQ(st.replays, 4);
  const double measured = double(al.stats().peak_bytes), planned = double(plan.peak());
  EXPECT_NEAR(measured / planned, 1.0, 0.05) << "measured " << measured << " planned " << planned;
}

// Recording takes no memory for values only ops touch (Recorder::allocate's lazy backing):
// tracing and planning a training step takes what the plan keeps (the arena and the state
// the step makes), not every intermediate the step records.
TEST(MemoryPlan, RecordingTakesOnlyWhatThePlanKeeps) {
  test_util::TrainRig r =
      test_util::make_rig({.sizes = {64, 512, 512, 512, 512, 512, 512, 8}, .adam = true});
  const Tensor x = randn({1024, 64}), y = randn({1024, 8});
  auto step = trace::function(
      [&](const Tensor& a, const Tensor& b) { return test_util::train_step(r, a, b); },
      {.name = "lazy_recording", .warmup_calls = 1});
  step(x, y).item<float>();
  wait_all();
  Engine::get().reclaim();
  Allocator& al = Allocator::get();
  al.empty_cache();
  const size_t before = al.stats().active_bytes;
  al.reset_peak();
  const trace::MemoryPlan plan = step.memory_plan(x, y);
  const size_t taken = al.stats().peak_bytes - before;
  EXPECT_LE(taken, plan.arena + plan.state + plan.outputs + plan.constants)
      << "recording took " << taken << " bytes; the plan keeps " << plan.arena << " + "
      << plan.state;
  // What recording took before its values had lazy memory: every intermediate.
  EXPECT_GT(plan.unshared, plan.arena + plan.state + plan.outputs + plan.constants);
}

TEST(MemoryPlan, RefusedBeforeTheWarmUpCalls) {
  test_util::TrainRig r = test_util::make_rig({.sizes = {8, 4}, .adam = true});
  const Tensor x = randn({2, 8}), y = randn({2, 4});
  auto step = trace::function(
      [&](const Tensor& a, const Tensor& b) { return test_util::train_step(r, a, b); },
      {.name = "early", .warmup_calls = 1});
  EXPECT_TIDE_ERROR(step.memory_plan(x, y), "[trace]", "'early'", "before its warm-up calls",
                    "0 of 1");
  EXPECT_EQ(step.stats().traces, 0);
}

// The eager prediction: every intermediate unshared, and of those the ones still needed
// after the output is written. a is read after the output (by c), b only by the output's
// node, c after it: unshared = a + b + c, after the outputs = a + c. Alive at once at most:
// a, b and y at y's node (x's last use is a's node). An eager step makes a, b, c and y and
// is given x.
TEST(MemoryPlan, TheEagerStepsIntermediatesAndWhatOutlivesItsOutput) {
  Tensor keep = zeros({1000});
  auto f = trace::function(
      [&](const Tensor& x) {
        Tensor a = mul(x, 2.0);
        Tensor b = add(a, 1.0);
        Tensor y = mul(b, 3.0);
        keep.copy_(mul(a, 4.0));
        return y;
      },
      {.name = "after_output"});
  const Tensor x = randn({1000});
  const trace::MemoryPlan plan = f.memory_plan(x);
  const size_t one = Allocator::round_size(1000 * sizeof(float));
  EXPECT_EQ(plan.unshared, 3 * one);
  EXPECT_EQ(plan.unshared_after_outputs, 2 * one);
  EXPECT_EQ(plan.step_after_outputs, 2 * one);
  EXPECT_EQ(plan.step_live_peak, 3 * one);
  EXPECT_EQ(plan.inputs, one);
  EXPECT_EQ(plan.outputs, one);
  EXPECT_EQ(plan.eager_step(), 5 * one);
  const size_t held = plan.parameters + plan.captured + plan.state + plan.constants;
  EXPECT_EQ(held, one) << "keep";
  EXPECT_EQ(plan.eager_peak(2), held + 2 * 5 * one);
  EXPECT_EQ(plan.eager_peak_reading(0), plan.eager_peak(1) + 2 * one);
  EXPECT_EQ(plan.eager_peak_reading(3), plan.eager_peak(4) + 2 * one);
  EXPECT_EQ(plan.eager_peak_bounded(2), plan.eager_peak(2) + 3 * one);
  EXPECT_EQ(plan.eager_peak_running(), held + 3 * one);
  EXPECT_NE(plan.str().find("eager"), std::string::npos);
}

// A training step makes its gradients afresh (zero_grad() dropped the last ones): the plan
// counts them as state, and an eager step queued whole holds its own set beside the
// previous step's, which its queued update still reads. Measured: two steps queued behind
// a held worker take what eager_step() says each (the arguments aside: the caller's).
TEST(MemoryPlan, AnEagerStepHoldsTheGradientsItMakes) {
  // Small GEMMs: OpenBLAS runs them on the calling thread (its own threads are not
  // instrumented, so TSan, which runs this suite, would see their writes as races).
  test_util::TrainRig r = test_util::make_rig({.sizes = {16, 64, 8}});
  const Tensor x = randn({32, 16}), y = randn({32, 8});
  auto step = trace::function(
      [&](const Tensor& a, const Tensor& b) { return test_util::train_step(r, a, b); },
      {.name = "fresh_gradients", .warmup_calls = 1});
  step(x, y);  // the eager warm-up: makes the gradients
  const trace::MemoryPlan plan = step.memory_plan(x, y);
  size_t grads = 0;
  for (const Tensor& p : r.model->parameters())
    grads += Allocator::round_size(size_t(p.numel()) * sizeof(float));
  EXPECT_EQ(plan.state, grads);
  EXPECT_EQ(plan.eager_step(), plan.unshared + plan.inputs + plan.outputs + grads + plan.constants);
  EXPECT_EQ(plan.eager_peak(2) - plan.eager_peak(1), plan.eager_step());
  wait_all();
  // The prediction is for outputs allocated at enqueue (CI also runs the suite with
  // TIDE_ALLOC=execution): measured under that setting, then the setting put back.
  const AllocationGuard at_enqueue(Allocation::at_enqueue);
  Allocator& alloc = Allocator::get();
  const size_t before = alloc.stats().active_bytes;
  size_t held = 0;
  ASSERT_TRUE(test_util::queues_without_waiting([&] {
    for (int i = 0; i < 2; ++i) test_util::train_step(r, x, y);
    held = alloc.stats().active_bytes - before;
  }));
  wait_all();
  const double want = 2.0 * double(plan.eager_step() - plan.inputs);
  EXPECT_NEAR(double(held), want, 0.02 * want);
}

}  // namespace
}  // namespace tide
