// Trainer: Policy parsing, the records each sync policy leaves, determinism across
// policies, the bounded policy's queue bound and its restoration, loss decrease, CSV.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "error_of.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace tide;
using namespace tide::train;
namespace fs = std::filesystem;

namespace {

using tide::test_util::error_of;

// A tiny regression run: Linear(8, 1) on 32x8 synthetic data, batch 8 (4 batches per
// epoch), SGD. The same seeds give the same run.
struct Tiny {
  Generator gen{1234};
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(nn::LinearOptions(8, 1), gen);
  SyntheticSource source{SyntheticOptions().examples(32).features(8).batch_size(8).seed(7)};
  SGD opt{model->parameters(), SGDOptions(0.05)};
  Trainer trainer{*model, nn::l2_loss, opt, source};

  TrainResult run(Policy p, int batches = 10, Mode mode = Mode::eager) {
    TrainerOptions o;
    o.batches = batches;
    o.policy = p;
    o.mode = mode;
    return trainer.run(o);
  }
};

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

TEST(Policy, ParseAndStr) {
  EXPECT_EQ(Policy::parse("per_batch").kind, SyncPolicy::per_batch);
  EXPECT_EQ(Policy::parse("none").kind, SyncPolicy::none);
  Policy b = Policy::parse("bounded:3");
  EXPECT_EQ(b.kind, SyncPolicy::bounded);
  EXPECT_EQ(b.k, 3);
  for (const char* s : {"per_batch", "none", "bounded:1", "bounded:12"})
    EXPECT_EQ(Policy::parse(s).str(), s);
}

TEST(Policy, ParseErrors) {
  for (const char* s : {"", "bounded", "bounded:", "bounded:0", "bounded:-1", "bounded:x",
                        "bounded:2x", "perbatch", "None", "bounded:99999999999"}) {
    std::string e = error_of([&] { Policy::parse(s); });
    EXPECT_NE(e.find("[trainer]"), std::string::npos) << "'" << s << "': " << e;
  }
}

TEST(Trainer, BadOptions) {
  Tiny t;
  EXPECT_NE(error_of([&] { t.run(Policy::none(), 0); }).find("[trainer] batches"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              t.run(Policy{SyncPolicy::bounded, 0});
            }).find("[trainer]"),
            std::string::npos);
}

TEST(Trainer, PerBatchReadsEveryLoss) {
  Tiny t;
  TrainResult r = t.run(Policy::per_batch());
  ASSERT_EQ(r.steps.size(), 10u);
  for (size_t i = 0; i < r.steps.size(); ++i) {
    EXPECT_EQ(r.steps[i].batch, int(i + 1));
    EXPECT_TRUE(std::isfinite(r.steps[i].loss)) << i;
    if (i) EXPECT_GE(r.steps[i].t_enqueue_s, r.steps[i - 1].t_enqueue_s);
  }
  EXPECT_EQ(bits(r.steps.back().loss), bits(r.final_loss));
  EXPECT_GT(r.ops_per_step, 0u);
  EXPECT_GT(r.peak_active, 0u);
}

TEST(Trainer, NoneReadsOnlyTheFinalLoss) {
  Tiny t;
  TrainResult r = t.run(Policy::none());
  ASSERT_EQ(r.steps.size(), 10u);
  for (size_t i = 0; i + 1 < r.steps.size(); ++i) EXPECT_TRUE(std::isnan(r.steps[i].loss)) << i;
  EXPECT_TRUE(std::isfinite(r.steps.back().loss));
  EXPECT_EQ(bits(r.steps.back().loss), bits(r.final_loss));
}

TEST(Trainer, PoliciesAreBitIdentical) {
  double losses[3];
  std::vector<float> w[3];
  Policy ps[3] = {Policy::per_batch(), Policy::none(), Policy::bounded(2)};
  for (int i = 0; i < 3; ++i) {
    Tiny t;
    losses[i] = t.run(ps[i]).final_loss;
    w[i] = t.model->weight().to_vector<float>();
  }
  EXPECT_EQ(bits(losses[0]), bits(losses[1]));
  EXPECT_EQ(bits(losses[0]), bits(losses[2]));
  EXPECT_EQ(w[0], w[1]);
  EXPECT_EQ(w[0], w[2]);
}

// The traced step (captured once, replayed per minibatch) trains exactly like eager.
TEST(Trainer, TracedModeIsBitIdenticalToEagerUnderEveryPolicy) {
  Tiny eager;
  TrainResult re = eager.run(Policy::per_batch(), 12);
  std::vector<float> we = eager.model->weight().to_vector<float>();
  for (Policy p : {Policy::per_batch(), Policy::none(), Policy::bounded(2)}) {
    Tiny t;
    TrainResult r = t.run(p, 12, Mode::traced);
    EXPECT_EQ(r.mode, Mode::traced);
    EXPECT_EQ(bits(r.final_loss), bits(re.final_loss)) << p.str();
    EXPECT_EQ(t.model->weight().to_vector<float>(), we) << p.str();
    if (p.kind == SyncPolicy::per_batch)
      for (size_t i = 0; i < r.steps.size(); ++i)
        EXPECT_EQ(bits(r.steps[i].loss), bits(re.steps[i].loss)) << "minibatch " << i + 1;
    trace::FunctionStats s = t.trainer.traced_stats();
    EXPECT_EQ(s.eager_calls, 1) << p.str();  // the warm-up minibatch
    EXPECT_EQ(s.traces, 1) << p.str();
    EXPECT_EQ(s.replays, 11) << p.str();
    // A replay is a handful of engine tasks, not one per op.
    EXPECT_LT(r.ops_per_step, re.ops_per_step) << p.str();
  }
  EXPECT_EQ(parse_mode("traced"), Mode::traced);
  EXPECT_NE(error_of([] { parse_mode("jit"); }).find("[trainer] unknown mode"), std::string::npos);
}

TEST(Trainer, BoundedKeepsQueueUnderItsBoundAndRestoresThePrevious) {
  Engine& eng = Engine::get();
  const uint64_t prev = eng.max_inflight_ops();
  eng.set_max_inflight_ops(0);
  for (int k : {1, 2, 3}) {
    Tiny t;
    TrainResult r = t.run(Policy::bounded(k), 12);
    EXPECT_EQ(r.bound_ops, uint64_t(k) * r.ops_per_step);
    for (size_t i = 1; i < r.steps.size(); ++i)
      EXPECT_LE(r.steps[i].queue_depth, r.bound_ops) << "k=" << k << " step " << i;
    EXPECT_EQ(eng.max_inflight_ops(), 0u);
  }
  eng.set_max_inflight_ops(12345);
  {
    Tiny t;
    t.run(Policy::bounded(2));
    EXPECT_EQ(eng.max_inflight_ops(), 12345u);
  }
  eng.set_max_inflight_ops(prev);
}

TEST(Trainer, LossDecreases) {
  Tiny t;
  TrainResult r = t.run(Policy::per_batch(), 20);
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss);
  EXPECT_LT(r.final_loss, 0.5 * r.steps.front().loss);
}

// With outputs allocated at enqueue a queued step holds its outputs; allocated at execution
// (TIDE_ALLOC=execution) it holds almost nothing, so the setting is fixed here.
TEST(Trainer, MeasureStepBytesIsPositive) {
  if (Engine::get().synchronous()) GTEST_SKIP() << "synchronous engine: no gate";
  const AllocationGuard at_enqueue(Allocation::at_enqueue);
  Tiny t;
  size_t b = t.trainer.measure_step_bytes();
  EXPECT_GT(b, 0u);
}

TEST(Trainer, WriteCsv) {
  Tiny t;
  TrainResult r = t.run(Policy::none(), 7);
  fs::path p = fs::temp_directory_path() / ("tide_trainer_" + std::to_string(::getpid()) + ".csv");
  r.write_csv(p.string());
  std::ifstream f(p);
  std::string line;
  int n = 0;
  std::getline(f, line);
  EXPECT_EQ(line.rfind("policy,batch,t_enqueue_s,loss,", 0), 0u) << line;
  EXPECT_TRUE(line.ends_with(",mode,device,alloc")) << line;  // the alloc column comes last
  const std::string tail = std::string(",eager,cpu,") + alloc_name(Engine::get().allocation());
  while (std::getline(f, line)) {
    EXPECT_EQ(line.rfind("none,", 0), 0u) << line;
    EXPECT_TRUE(line.ends_with(tail)) << line;
    ++n;
  }
  EXPECT_EQ(n, 7);
  fs::remove(p);

  std::string e = error_of([&] { r.write_csv("/nonexistent-dir/x/y.csv"); });
  EXPECT_NE(e.find("[trainer]"), std::string::npos) << e;
  e = error_of([&] { write_csv("/nonexistent-dir/x/y.csv", {r, r}); });
  EXPECT_NE(e.find("[trainer]"), std::string::npos) << e;
}
