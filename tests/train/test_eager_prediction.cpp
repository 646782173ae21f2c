// train::predict_eager_peak (train/eager_prediction.h): the textbook MLP's eager step
// (512-2048-512-1, batch 1024, SGD: `tide mlp-memory`'s), planned by Trainer::plan_step on a
// throwaway copy, predicts the allocator's peak of a fresh run under each policy within
// 5 %, outputs allocated at enqueue (per_batch, bounded:1, bounded:2) and at execution
// (per_batch, none); `none` at enqueue and bounded:K at execution are not predicted, with a
// bound in the reason. The step is large
// enough (tens of ms per minibatch) that the frontend is always ahead of the worker, the
// case the prediction describes.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/eager_prediction.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace tide;
using namespace tide::train;

namespace {

struct Mlp {
  Generator gen{42};
  std::shared_ptr<nn::Sequential> net =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(nn::LinearOptions(512, 2048), gen),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Linear>(nn::LinearOptions(2048, 512), gen),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Linear>(nn::LinearOptions(512, 1), gen)});
  SyntheticSource source{SyntheticOptions().examples(1024).features(512).batch_size(1024)};
  SGD opt{net->parameters(), SGDOptions(0.005)};
  Trainer trainer{*net, nn::l2_loss, opt, source};
};

class AllocationScope {
 public:
  explicit AllocationScope(Allocation a) : prev_(Engine::get().allocation()) {
    Engine::get().set_allocation(a);
  }
  ~AllocationScope() { Engine::get().set_allocation(prev_); }

 private:
  Allocation prev_;
};

constexpr int kBatches = 6;

PeakPrediction predicted(const Policy& p, Allocation a) {
  const trace::MemoryPlan plan = Mlp().trainer.plan_step();
  return predict_eager_peak(plan, p, a, Engine::get().synchronous(), kBatches);
}

size_t measured(const Policy& p, Allocation a) {
  AllocationScope scope(a);
  Mlp m;
  TrainerOptions o;
  o.batches = kBatches;
  o.policy = p;
  return m.trainer.run(o).peak_active;
}

void expect_within_5_percent(const Policy& p, Allocation a) {
  const PeakPrediction want = predicted(p, a);
  ASSERT_TRUE(want.predicted()) << want.not_predicted;
  const double got = double(measured(p, a));
  EXPECT_NEAR(got / double(want.bytes), 1.0, 0.05)
      << p.str() << " at " << alloc_name(a) << ": measured " << got << " predicted " << want.bytes;
}

}  // namespace

TEST(EagerPrediction, PerBatchAtEnqueue) {
  expect_within_5_percent(Policy::per_batch(), Allocation::at_enqueue);
}

TEST(EagerPrediction, BoundedAtEnqueue) {
  expect_within_5_percent(Policy::bounded(1), Allocation::at_enqueue);
  expect_within_5_percent(Policy::bounded(2), Allocation::at_enqueue);
}

TEST(EagerPrediction, AtExecution) {
  expect_within_5_percent(Policy::per_batch(), Allocation::at_execution);
  expect_within_5_percent(Policy::none(), Allocation::at_execution);
}

TEST(EagerPrediction, NoneAtEnqueueAndBoundedAtExecutionAreNotPredicted) {
  const trace::MemoryPlan plan = Mlp().trainer.plan_step();
  const PeakPrediction p =
      predict_eager_peak(plan, Policy::none(), Allocation::at_enqueue, false, kBatches);
  EXPECT_FALSE(p.predicted());
  EXPECT_NE(p.not_predicted.find(
                "at most all 6 minibatches: " + trace::mb_text(plan.eager_peak(kBatches)) + " MB"),
            std::string::npos)
      << p.not_predicted;
  // The step's figures the predictions are made of: the gradients and the batch count in
  // each eager step, and the remainder after the loss is most of it (the backward).
  EXPECT_EQ(plan.eager_step(),
            plan.unshared + plan.state + plan.constants + plan.inputs + plan.outputs);
  EXPECT_GT(plan.state, 0u);
  EXPECT_GT(plan.step_after_outputs, plan.unshared_after_outputs);
  EXPECT_LE(plan.step_live_peak, plan.eager_step());
  const PeakPrediction b =
      predict_eager_peak(plan, Policy::bounded(2), Allocation::at_execution, false, kBatches);
  EXPECT_FALSE(b.predicted());
  EXPECT_NE(b.not_predicted.find(trace::mb_text(plan.eager_peak_running()) + " MB plus"),
            std::string::npos)
      << b.not_predicted;
  EXPECT_THROW(predict_eager_peak(plan, Policy::per_batch(), Allocation::at_enqueue, false, 0),
               Error);
}
