// The Trainer stops with an error a user sees: on labels outside the
// classes (the loss fails: cross_entropy's check runs with the kernel) and on a loss that is
// not finite (what a bad label gives on a real GPU, or a diverging run), under every sync
// policy, instead of recording NaN or 0 and returning normally.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "error_of.h"
#include "idx_files.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace tide;
using namespace tide::train;

namespace {

using tide::test_util::error_of;

// A Fashion-MNIST-like pair of IDX files (n images of 4x4) in a fresh directory; label e is
// e % 10, except that example `bad_at` has label `bad`.
class BadLabels : public test_util::IdxFilesTest {
 protected:
  IdxOptions write_pair(uint32_t n, uint32_t bad_at, uint8_t bad) {
    std::vector<uint8_t> labels = test_util::labels_bytes(n);
    labels[test_util::kLabelsHeader + bad_at] = bad;
    return IdxOptions()
        .files(write("images", test_util::images_bytes(n, 4, 4)), write("labels", labels))
        .batch_size(8)
        .shuffle(false);
  }
};

TrainResult train_mlp(DataSource& source, Policy policy, int batches) {
  Generator gen{3};
  nn::Sequential net({std::make_shared<nn::Linear>(nn::LinearOptions(16, 8), gen),
                      std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::Linear>(nn::LinearOptions(8, 10), gen)});
  Adam opt(net.parameters(), AdamOptions(1e-3));
  Trainer trainer(net, nn::cross_entropy, opt, source);
  TrainerOptions o;
  o.batches = batches;
  o.policy = policy;
  return trainer.run(o);
}

}  // namespace

// `tide train fashion-mnist` on a file with label 200 printed "loss 0.0000" and exited 0.
TEST_F(BadLabels, AnOutOfRangeLabelStopsTrainingUnderEveryPolicy) {
  for (Policy p : {Policy::per_batch(), Policy::none(), Policy::bounded(2)}) {
    SCOPED_TRACE(p.str());
    IdxSource source(write_pair(32, 11, 200));  // in the second minibatch
    std::string e = error_of([&] { train_mlp(source, p, 4); });
    EXPECT_NE(e.find("[cross_entropy]"), std::string::npos) << e;
    EXPECT_NE(e.find("label 200"), std::string::npos) << e;
    EXPECT_NE(e.find("10 classes"), std::string::npos) << e;
  }
  // The same data with the label in range trains normally.
  IdxSource good(write_pair(32, 11, 3));
  TrainResult r = train_mlp(good, Policy::per_batch(), 4);
  for (const StepRecord& s : r.steps) EXPECT_TRUE(std::isfinite(s.loss)) << s.batch;
}

// A loss that is not finite stops the run with "[trainer]" naming the minibatch (per_batch
// reads every loss; the other policies find it at the end, where the last loss is read).
TEST(TrainerErrors, ANonFiniteLossStopsTheRun) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf}) {
    for (Policy p : {Policy::per_batch(), Policy::none(), Policy::bounded(1)}) {
      SCOPED_TRACE(p.str() + " " + std::to_string(bad));
      Generator gen{5};
      auto model = std::make_shared<nn::Linear>(nn::LinearOptions(4, 1), gen);
      SyntheticSource source{SyntheticOptions().examples(16).features(4).batch_size(4).seed(1)};
      SGD opt{model->parameters(), SGDOptions(0.01)};
      int calls = 0;
      // Finite for the first two minibatches, then `bad` (the parameters become NaN too).
      auto loss = [&](const Tensor& pred, const Tensor& y) {
        Tensor l = nn::l2_loss(pred, y);
        return ++calls <= 2 ? l : l * bad;
      };
      Trainer trainer(*model, loss, opt, source);
      TrainerOptions o;
      o.batches = 5;
      o.policy = p;
      const uint64_t bound = Engine::get().max_inflight_ops();
      std::string e = error_of([&] { trainer.run(o); });
      EXPECT_NE(e.find("[trainer]"), std::string::npos) << e;
      EXPECT_NE(e.find("not finite"), std::string::npos) << e;
      EXPECT_NE(e.find(p.kind == SyncPolicy::per_batch ? "minibatch 3" : "minibatch 5"),
                std::string::npos)
          << e;
      EXPECT_EQ(Engine::get().max_inflight_ops(), bound) << "the bound is restored on error";
    }
  }
}
