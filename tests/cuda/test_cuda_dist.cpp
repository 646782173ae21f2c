// The NCCL process group on a real GPU, as a 1-rank group (scripts/gpu_check.sh
// runs it on a GPU machine): the collectives go through NCCL on the group's CUDA stream,
// hazard-ordered against the compute stream, DataParallel reduces GPU gradients, eagerly
// and in a traced step's CUDA graph. With
// one rank a sum and an average leave the values as they are, so the checks are exact.
// Skipped (the suite exits 77) without a GPU; a build without NCCL checks its message.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/data_parallel.h"
#include "dist/nccl.h"
#include "error_of.h"
#include "nn/module.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "trace/trace.h"

namespace tide {
namespace {

using test_util::error_of;

// A 16-32-4 MLP on cuda:0 from `seed`.
std::shared_ptr<nn::Sequential> gpu_mlp(uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions(16, 32), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(32, 4), gen)});
  m->to(Device::cuda(0));
  return m;
}

TEST(CudaNccl, OneRankGroupAllReducesAndBroadcastsOnTheGpu) {
  if (!dist::nccl_available()) {
    EXPECT_NE(error_of([] { dist::nccl_world(0); }).find("built without NCCL"), std::string::npos);
    GTEST_SKIP() << "this build has no NCCL";
  }
  dist::ProcessGroup& pg = dist::nccl_world(0);
  EXPECT_STREQ(pg.backend(), "nccl");
  EXPECT_EQ(pg.device(), Device::cuda(0));
  EXPECT_EQ(pg.size(), 1);
  const Device dev = Device::cuda(0);
  Tensor x = arange(0.0, 1001.0, 1.0, DType::float32, dev);
  Tensor y = x * 3.0;  // written on the compute stream
  pg.all_reduce(y);
  pg.all_reduce(y, dist::ReduceOp::average);
  Tensor z = y + 1.0;  // read after the collectives
  std::vector<float> got = z.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(3 * i + 1)) << i;
  Tensor d = full({7}, 2.5, DType::float64, dev);
  pg.broadcast(d, 0);
  pg.barrier();
  EXPECT_EQ(d.to_vector<double>(), std::vector<double>(7, 2.5));
  Tensor i64 = full({5}, 7.0, DType::int64, dev);
  pg.all_reduce(i64);
  EXPECT_EQ(i64.to_vector<int64_t>(), std::vector<int64_t>(5, 7));
  EXPECT_NE(error_of([&] { pg.all_reduce(ones({2})); }).find("needs a tensor on cuda:0"),
            std::string::npos);
}

TEST(CudaNccl, DataParallelStepEqualsTheOneProcessStep) {
  if (!dist::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  dist::ProcessGroup& pg = dist::nccl_world(0);
  const Device dev = Device::cuda(0);
  auto with_dp = gpu_mlp(5), alone = gpu_mlp(5);
  dist::DataParallel dp(*with_dp, pg,
                        dist::DataParallelOptions().first_bucket_bytes(256).bucket_bytes(1024));
  Generator data(8);
  Tensor x = randn({9, 16}, DType::float32, data, dev),
         y = randn({9, 4}, DType::float32, data, dev);
  for (nn::Module* m :
       {static_cast<nn::Module*>(with_dp.get()), static_cast<nn::Module*>(alone.get())}) {
    Tensor diff = (*m)(x)-y;
    mean(diff * diff).backward();
    if (m == with_dp.get()) dp.reduce_gradients();
  }
  auto a = with_dp->named_parameters();
  auto b = alone->parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.grad().to_vector<float>(), b[i].grad().to_vector<float>()) << a[i].first;
}

// A traced data-parallel training step on a 1-rank NCCL group: the step's CUDA graph holds
// the NCCL kernels, the agreements run on the host before each replay, and the graph is
// built (every rank agrees). Equal to the eager step bit for bit.
TEST(CudaNccl, ATracedDataParallelStepIsOneGraphAndEqualsEager) {
  if (!dist::nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  dist::ProcessGroup& pg = dist::nccl_world(0);
  const Device dev = Device::cuda(0);
  auto eager = gpu_mlp(6), traced = gpu_mlp(6);
  const auto opts = dist::DataParallelOptions().first_bucket_bytes(256).bucket_bytes(1024);
  dist::DataParallel dp_eager(*eager, pg, opts), dp_traced(*traced, pg, opts);
  auto step = [](nn::Module& m, dist::DataParallel& dp, const Tensor& x, const Tensor& y) {
    for (Tensor& p : m.parameters()) p.zero_grad();
    Tensor diff = m(x) - y;
    Tensor loss = mean(diff * diff);
    loss.backward();
    dp.reduce_gradients();
    NoGrad no_grad;
    for (Tensor& p : m.parameters()) p.sub_(p.grad(), 0.05);
    return loss;
  };
  auto f = trace::function(
      [&](const Tensor& x, const Tensor& y) { return step(*traced, dp_traced, x, y); },
      {.name = "dp_step_nccl"});
  Generator data(9);
  for (int i = 0; i < 5; ++i) {
    Tensor x = randn({9, 16}, DType::float32, data, dev),
           y = randn({9, 4}, DType::float32, data, dev);
    EXPECT_EQ(f(x, y).to_vector<float>(), step(*eager, dp_eager, x, y).to_vector<float>()) << i;
  }
  auto e = eager->named_parameters();
  auto t = traced->parameters();
  for (size_t i = 0; i < e.size(); ++i)
    EXPECT_EQ(t[i].to_vector<float>(), e[i].second.to_vector<float>()) << e[i].first;
  EXPECT_EQ(f.stats().graph_fallback, "") << "NCCL's kernels must be captured";
}

}  // namespace
}  // namespace tide
