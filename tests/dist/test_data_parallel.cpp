// DataParallel over the MPI world group, run by every rank of `mpirun -n 2`: the bucket
// layout, the broadcast at construction, and training where the ranks must end bitwise
// equal and match one process that sees the whole batch.
#include <gtest/gtest.h>

#include <chrono>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "error_of.h"
#include "nn/module.h"
#include "nn/nn.h"
#include "ops/autograd.h"
#include "ops/debug.h"
#include "ops/ops.h"
#include "trace/trace.h"

namespace tide {
namespace {

using dist::DataParallel;
using dist::DataParallelOptions;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions(4, 8), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(8, 3), gen)});
}

// True on every rank when rank 0's t equals this rank's bit for bit.
bool same_as_rank0(dist::ProcessGroup& pg, const Tensor& t) {
  Tensor theirs = clone(t.detach());
  pg.broadcast(theirs, 0);
  return theirs.to_vector<float>() == t.to_vector<float>();
}

// One SGD step on the mean squared error of model(x) against y.
void sgd_step(nn::Module& model, const Tensor& x, const Tensor& y, DataParallel* dp) {
  for (Tensor& p : model.parameters()) p.zero_grad();
  Tensor d = model(x) - y;
  mean(d * d).backward();
  if (dp) dp->reduce_gradients();
  NoGrad no_grad;
  for (Tensor& p : model.parameters()) p.sub_(p.grad(), 0.1);
}

TEST(DataParallel, BucketsInReverseOrderUnderTheCaps) {
  auto& pg = dist::mpi_world();
  auto mlp = make_mlp(1);
  // Parameters: 0.weight 128 B, 0.bias 32 B, 2.weight 96 B, 2.bias 12 B. A bucket closes
  // with the gradient that reaches its cap: 12 >= 8; 96 + 32 >= 100; 128 >= 100.
  DataParallel dp(*mlp, pg, DataParallelOptions().first_bucket_bytes(8).bucket_bytes(100));
  ASSERT_EQ(dp.buckets().size(), 3u);
  EXPECT_EQ(dp.buckets()[0].params, (std::vector<size_t>{3}));
  EXPECT_EQ(dp.buckets()[1].params, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(dp.buckets()[1].offsets, (std::vector<int64_t>{0, 24}));
  EXPECT_EQ(dp.buckets()[1].numel, 32);
  EXPECT_EQ(dp.buckets()[2].params, (std::vector<size_t>{0}));
  EXPECT_EQ(dp.bytes_per_step(), 268u);

  DataParallel one(*mlp, pg, DataParallelOptions().first_bucket_bytes(1 << 20));
  ASSERT_EQ(one.buckets().size(), 1u);
  EXPECT_EQ(one.buckets()[0].params, (std::vector<size_t>{3, 2, 1, 0}));
  // PyTorch's layout of the textbook MLP: the first bucket takes 2.weight past its cap.
  DataParallel two(*mlp, pg, DataParallelOptions().first_bucket_bytes(64).bucket_bytes(1 << 20));
  ASSERT_EQ(two.buckets().size(), 2u);
  EXPECT_EQ(two.buckets()[0].params, (std::vector<size_t>{3, 2}));
  EXPECT_EQ(two.buckets()[1].params, (std::vector<size_t>{1, 0}));

  EXPECT_TRUE(test_util::error_of([&] {
                DataParallel bad(*mlp, pg, DataParallelOptions().bucket_bytes(0));
              }).find("[data_parallel] bucket caps must be positive") != std::string::npos);
  nn::Sequential empty;
  EXPECT_TRUE(test_util::error_of([&] {
                DataParallel bad(empty, pg);
              }).find("[data_parallel] the module has no parameters") != std::string::npos);
}

TEST(DataParallel, BroadcastsRank0sParameters) {
  auto& pg = dist::mpi_world();
  auto mlp = make_mlp(100 + uint64_t(pg.rank()));  // every rank starts elsewhere
  DataParallel dp(*mlp, pg);
  for (const auto& [name, p] : mlp->named_parameters()) EXPECT_TRUE(same_as_rank0(pg, p)) << name;
}

// A model with batch norm: its running estimates (and step count) are buffers.
std::shared_ptr<nn::Sequential> make_bn_net(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 2, 1), gen),
      std::make_shared<nn::BatchNorm2d>(2)});
}

// Buffers compared as float64 (num_batches_tracked is int64).
bool buffer_same_as_rank0(dist::ProcessGroup& pg, const Tensor& b) {
  return same_as_rank0(pg, cast(b, DType::float32));
}

// Each rank normalises its own data, so the running estimates differ after a step unless
// they are broadcast; by default they are rank 0's everywhere after reduce_gradients().
TEST(DataParallel, BroadcastsBuffersAfterEachStep) {
  auto& pg = dist::mpi_world();
  for (bool broadcast : {true, false}) {
    SCOPED_TRACE(broadcast ? "broadcast_buffers(true)" : "broadcast_buffers(false)");
    auto net = make_bn_net(3);
    DataParallel dp(*net, pg, DataParallelOptions().broadcast_buffers(broadcast));
    Generator data(50 + uint64_t(pg.rank()));  // every rank sees other images
    for (int step = 0; step < 2; ++step) {
      for (Tensor& p : net->parameters()) p.zero_grad();
      Tensor y = (*net)(randn({4, 1, 3, 3}, DType::float32, data));
      mean(y * y).backward();
      dp.reduce_gradients();
    }
    for (const auto& [name, b] : net->named_buffers()) {
      const bool same = buffer_same_as_rank0(pg, b);
      if (broadcast || name.find("num_batches") != std::string::npos) EXPECT_TRUE(same) << name;
      else if (pg.rank() > 0)  // rank 0 is always the same as itself
        EXPECT_FALSE(same) << name << ": each rank keeps its own estimates";
    }
  }
}

// Each rank trains on its half of the batch; the averaged gradient is the full batch's, so
// the ranks stay bitwise equal and match one model trained on the whole batch.
TEST(DataParallel, HalfBatchPerRankMatchesTheWholeBatch) {
  auto& pg = dist::mpi_world();
  const int64_t per_rank = 6, batch = per_rank * pg.size();
  for (size_t first_bucket : {size_t(64), size_t(1) << 20}) {  // several buckets, then one
    SCOPED_TRACE("first_bucket_bytes " + std::to_string(first_bucket));
    auto mlp = make_mlp(7 + uint64_t(pg.rank()));
    DataParallel dp(*mlp, pg,
                    DataParallelOptions().first_bucket_bytes(first_bucket).bucket_bytes(256));
    auto whole = make_mlp(0);  // the one-process reference, from the same start
    {
      NoGrad no_grad;
      auto ps = mlp->parameters(), ws = whole->parameters();
      for (size_t i = 0; i < ps.size(); ++i) ws[i].copy_(ps[i]);
    }
    Generator data(42);  // the same data on every rank
    for (int step = 0; step < 5; ++step) {
      Tensor x = randn({batch, 4}, DType::float32, data);
      Tensor y = randn({batch, 3}, DType::float32, data);
      const int64_t lo = pg.rank() * per_rank;
      sgd_step(*mlp, x.slice(lo, lo + per_rank), y.slice(lo, lo + per_rank), &dp);
      sgd_step(*whole, x, y, nullptr);
    }
    auto ps = mlp->named_parameters();
    auto ws = whole->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_TRUE(same_as_rank0(pg, ps[i].second)) << ps[i].first;
      std::vector<float> got = ps[i].second.to_vector<float>(), want = ws[i].to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[k], 1e-5) << ps[i].first << "[" << k << "]";
    }
  }
}

// A traced training step (forward, backward, the bucketed average, the update) equals the
// eager one bit for bit, and so does the step without overlap: the average is the same
// sums in the same order, only started later.
TEST(DataParallel, TracedAndNonOverlappedStepsEqualTheEagerOne) {
  auto& pg = dist::mpi_world();
  auto eager = make_mlp(11), traced = make_mlp(11), serial = make_mlp(11);
  const auto opts = DataParallelOptions().first_bucket_bytes(8).bucket_bytes(100);
  DataParallel dp_eager(*eager, pg, opts), dp_traced(*traced, pg, opts),
      dp_serial(*serial, pg, DataParallelOptions(opts).overlap(false));
  ASSERT_GT(dp_traced.buckets().size(), 2u);
  auto step = trace::function(
      [&](const Tensor& x, const Tensor& y) {
        sgd_step(*traced, x, y, &dp_traced);
        return traced->parameters()[0] * 1.0;
      },
      {.name = "dp_step", .warmup_calls = 1});
  Generator data(5 + uint64_t(pg.rank()));  // each rank its own data
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({3, 4}, DType::float32, data), y = randn({3, 3}, DType::float32, data);
    sgd_step(*eager, x, y, &dp_eager);
    sgd_step(*serial, x, y, &dp_serial);
    step(x, y);
  }
  EXPECT_EQ(step.stats().replays, 3);
  auto es = eager->named_parameters();
  auto ts = traced->parameters(), ss = serial->parameters();
  for (size_t i = 0; i < es.size(); ++i) {
    EXPECT_EQ(ts[i].to_vector<float>(), es[i].second.to_vector<float>()) << es[i].first;
    EXPECT_EQ(ss[i].to_vector<float>(), es[i].second.to_vector<float>()) << es[i].first;
    EXPECT_TRUE(same_as_rank0(pg, es[i].second)) << es[i].first;
  }
}

// Without overlap no bucket starts while a gradient is still being written: with one held,
// even the first bucket, whose gradient is final, waits.
TEST(DataParallel, WithoutOverlapNoBucketStartsBeforeEveryGradient) {
  auto& pg = dist::mpi_world();
  if (Engine::get().synchronous()) GTEST_SKIP() << "the gate would block the caller";
  auto mlp = make_mlp(3);
  DataParallel dp(*mlp, pg,
                  DataParallelOptions().first_bucket_bytes(8).bucket_bytes(100).overlap(false));
  Tensor x = full({2, 4}, 0.5 + pg.rank()), y = zeros({2, 3});
  Tensor d = (*mlp)(x)-y;
  mean(d * d).backward();
  // A held write of the first layer's gradient on another stream stands for a backward
  // that has not finished it yet.
  std::latch release(1);
  Tensor w0 = mlp->parameters()[0].grad();
  Stream writer = Stream::create(Device::cpu());
  {
    StreamGuard on_writer(writer);
    debug::gate(w0, [&] { release.wait(); });
  }
  dp.reduce_gradients();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // The last layer's bias is the first bucket: with overlap it would be reduced by now.
  EXPECT_FALSE(mlp->parameters()[3].grad().is_ready());
  release.count_down();
  for (const auto& [name, p] : mlp->named_parameters())
    EXPECT_TRUE(same_as_rank0(pg, p.grad())) << name;
}

// The reduction runs off the compute stream: with that stream held by a gate queued after
// backward, the averaged gradients still arrive. (Queued on the compute stream, the copies
// would wait behind the gate; on the communication stream each waits only for its own
// gradients, which is what lets a bucket overlap the rest of backward.)
TEST(DataParallel, ReducesWhileTheComputeStreamIsHeld) {
  auto& pg = dist::mpi_world();
  if (Engine::get().synchronous()) GTEST_SKIP() << "the gate would block the caller";
  auto mlp = make_mlp(3);
  DataParallel dp(*mlp, pg, DataParallelOptions().first_bucket_bytes(8).bucket_bytes(100));
  ASSERT_GT(dp.buckets().size(), 2u);
  Tensor x = full({2, 4}, 0.5 + pg.rank()), y = zeros({2, 3});
  Tensor d = (*mlp)(x)-y;
  mean(d * d).backward();
  std::latch release(1);
  Tensor hold = zeros({1});
  debug::gate(hold, [&] { release.wait(); });  // the compute stream stops here
  dp.reduce_gradients();
  bool arrived = false;
  for (int i = 0; i < 2000 && !arrived; ++i) {
    arrived = true;
    for (const Tensor& p : dp.parameters()) arrived = arrived && p.grad().is_ready();
    if (!arrived) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(arrived) << "the gradients waited for the held compute stream";
  EXPECT_FALSE(hold.is_ready());
  release.count_down();
  for (const auto& [name, p] : mlp->named_parameters())
    EXPECT_TRUE(same_as_rank0(pg, p.grad())) << name;
}

}  // namespace
}  // namespace tide
