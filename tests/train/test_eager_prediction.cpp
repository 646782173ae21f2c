// train::predict_eager_peak (train/eager_prediction.h) on two models, each planned by
// Trainer::plan_step on a throwaway copy and then trained fresh: the textbook MLP
// (512-2048-512-1, batch 1024, SGD: `tide mlp-memory`'s) and the Fashion-MNIST CNN
// (examples/cli/fashion_cnn.h, Adam, batch 128 of random images). The predicted allocator
// peak is within 5 % of the measured one, outputs allocated at enqueue (per_batch,
// bounded:K) and at execution (per_batch, none); `none` at enqueue and bounded:K at
// execution are not predicted, with a bound in the reason. Traced runs' steady peaks
// (predict_traced_peak) likewise, `none` not predicted. Both steps are large enough
// (tens of ms per minibatch) that the frontend is ahead of the worker, the case the
// prediction describes; bounded:K at enqueue, which needs it ahead at one op, gets up to 3
// runs on a loaded machine.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "examples/cli/fashion_cnn.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/eager_prediction.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace tide;
using namespace tide::train;

namespace {

// Enough minibatches for the frontend to fill a bounded window on a loaded machine: with 6,
// one of 8 runs of `mlp-memory --policy bounded:2` at load 4 on 2 cores measured 5.4 % below.
constexpr int kBatches = 12;

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

// Random images (128, 1, 28, 28) and labels 0: the memory does not depend on the values.
class Images : public DataSource {
 public:
  static constexpr int64_t kBatch = 128;
  int64_t size() const override { return kBatch; }
  int64_t batch_size() const override { return kBatch; }
  void reset(uint64_t) override { done_ = false; }
  std::optional<Batch> next_batch() override {
    if (done_) return std::nullopt;
    done_ = true;
    return Batch{randn({kBatch, 1, 28, 28}, DType::float32, gen_), zeros({kBatch}, DType::int64)};
  }

 private:
  Generator gen_{3};
  bool done_ = false;
};

struct Cnn {
  Generator gen{42};
  std::shared_ptr<nn::Sequential> net = examples::fashion_cnn(28, 28, gen);
  Images source;
  Adam opt{net->parameters(), AdamOptions(1e-3)};
  Trainer trainer{*net, [](const Tensor& p, const Tensor& y) { return nn::cross_entropy(p, y); },
                  opt, source};
};

// Prints one line per case (docs/memory.md quotes them) and checks it. Eager: the run's
// allocator peak against predict_eager_peak; traced: its steady peak (the second half of
// the minibatches, replays only) against predict_traced_peak.
template <class Model>
void expect_within_5_percent(const char* model, const Policy& p, Allocation a,
                             Mode mode = Mode::eager) {
  const bool traced = mode == Mode::traced;
  const trace::MemoryPlan plan = Model().trainer.plan_step();
  const bool sync = Engine::get().synchronous();
  const PeakPrediction want = traced ? predict_traced_peak(plan, p, a, sync, kBatches)
                                     : predict_eager_peak(plan, p, a, sync, kBatches);
  ASSERT_TRUE(want.predicted()) << want.not_predicted;
  AllocationGuard scope(a);
  // bounded:K at enqueue peaks when the frontend keeps up with the worker op by op (the op
  // bound admits one op per op run); on a loaded machine it can fall behind at the peak's
  // op and the run peaks lower (72.1 MB for 78.1 predicted, once in CI). Such a run is
  // repeated, up to 3 runs in all: the highest must reach the prediction, none exceed it.
  const bool timing = !traced && a == Allocation::at_enqueue && p.kind == SyncPolicy::bounded;
  TrainResult r;
  double got = 0;
  for (int run = 0; run < (timing ? 3 : 1); ++run) {
    Model m;
    TrainerOptions o;
    o.batches = kBatches;
    o.policy = p;
    o.mode = mode;
    const TrainResult ri = m.trainer.run(o);
    const double g = double(traced ? ri.steady_peak_active : ri.peak_active);
    EXPECT_LE(g / double(want.bytes), 1.05) << p.str() << " run " << run << ": measured " << g;
    if (g >= got) got = g, r = ri;
    if (got / double(want.bytes) >= 0.95) break;
  }
  std::printf("%s%s %s at %s: predicted %s MB, measured %s MB\n", model, traced ? " traced" : "",
              p.str().c_str(), alloc_name(a), trace::mb_text(want.bytes).c_str(),
              trace::mb_text(size_t(got)).c_str());
  EXPECT_NEAR(got / double(want.bytes), 1.0, 0.05)
      << p.str() << (traced ? " traced" : "") << " at " << alloc_name(a) << ": measured " << got
      << " predicted " << want.bytes;
  EXPECT_GE(r.peak_active, r.steady_peak_active);
}

}  // namespace

TEST(EagerPrediction, PerBatchAtEnqueue) {
  expect_within_5_percent<Mlp>("mlp", Policy::per_batch(), Allocation::at_enqueue);
  expect_within_5_percent<Cnn>("cnn", Policy::per_batch(), Allocation::at_enqueue);
}

TEST(EagerPrediction, BoundedAtEnqueue) {
  expect_within_5_percent<Mlp>("mlp", Policy::bounded(1), Allocation::at_enqueue);
  expect_within_5_percent<Mlp>("mlp", Policy::bounded(2), Allocation::at_enqueue);
  expect_within_5_percent<Cnn>("cnn", Policy::bounded(2), Allocation::at_enqueue);
}

TEST(EagerPrediction, AtExecution) {
  expect_within_5_percent<Mlp>("mlp", Policy::per_batch(), Allocation::at_execution);
  expect_within_5_percent<Mlp>("mlp", Policy::none(), Allocation::at_execution);
  expect_within_5_percent<Cnn>("cnn", Policy::none(), Allocation::at_execution);
}

TEST(EagerPrediction, NoneAtEnqueueAndBoundedAtExecutionAreNotPredicted) {
  const trace::MemoryPlan plan = Mlp().trainer.plan_step();
  const PeakPrediction p =
      predict_eager_peak(plan, Policy::none(), Allocation::at_enqueue, false, kBatches);
  EXPECT_FALSE(p.predicted());
  EXPECT_NE(p.not_predicted.find(
                "at most all 12 minibatches: " + trace::mb_text(plan.eager_peak(kBatches)) + " MB"),
            std::string::npos)
      << p.not_predicted;
  const PeakPrediction b =
      predict_eager_peak(plan, Policy::bounded(2), Allocation::at_execution, false, kBatches);
  EXPECT_FALSE(b.predicted());
  EXPECT_NE(b.not_predicted.find(trace::mb_text(plan.eager_peak_running()) + " MB plus"),
            std::string::npos)
      << b.not_predicted;
  // The step's figures the predictions are made of: the gradients and the batch count in
  // each eager step, and the remainder after the loss is most of it (the backward).
  EXPECT_EQ(plan.eager_step(),
            plan.unshared + plan.state + plan.constants + plan.inputs + plan.outputs);
  EXPECT_GT(plan.state, 0u);
  EXPECT_GT(plan.step_after_outputs, plan.unshared_after_outputs);
  EXPECT_LE(plan.step_live_peak, plan.eager_step());
  EXPECT_THROW(predict_eager_peak(plan, Policy::per_batch(), Allocation::at_enqueue, false, 0),
               Error);
}

TEST(TracedPrediction, SteadyPeaksOfTheReplays) {
  const Mode traced = Mode::traced;
  expect_within_5_percent<Mlp>("mlp", Policy::per_batch(), Allocation::at_enqueue, traced);
  expect_within_5_percent<Mlp>("mlp", Policy::bounded(2), Allocation::at_enqueue, traced);
  expect_within_5_percent<Mlp>("mlp", Policy::per_batch(), Allocation::at_execution, traced);
  expect_within_5_percent<Cnn>("cnn", Policy::bounded(2), Allocation::at_enqueue, traced);
}

TEST(TracedPrediction, NoneIsNotPredicted) {
  const trace::MemoryPlan plan = Mlp().trainer.plan_step();
  for (Allocation a : {Allocation::at_enqueue, Allocation::at_execution}) {
    const PeakPrediction p = predict_traced_peak(plan, Policy::none(), a, false, kBatches);
    EXPECT_FALSE(p.predicted());
    EXPECT_NE(p.not_predicted.find("the planned " + trace::mb_text(plan.peak()) + " MB"),
              std::string::npos)
        << p.not_predicted;
  }
  // Synchronous: only the running replay.
  EXPECT_EQ(predict_traced_peak(plan, Policy::none(), Allocation::at_enqueue, true, kBatches).bytes,
            plan.peak());
  EXPECT_THROW(predict_traced_peak(plan, Policy::per_batch(), Allocation::at_enqueue, false, 0),
               Error);
}
