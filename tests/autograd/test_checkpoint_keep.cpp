// Selective recomputation (CheckpointOptions, ops/checkpoint_keep.h): a checkpoint that keeps
// its large-K GEMMs' and its attention's outputs gives the loss and gradients of the plain
// code bit for bit, on the CPU and the fake GPU; its recompute queues exactly the kept ops
// fewer; a GEMM below the K bound is recomputed; an output written in place during the first
// run is recomputed, not reused; a recompute that runs other kept ops is refused.
#include <vector>

#include "../core/test_support.h"
#include "../fake_gpu.h"

namespace tide {
namespace {

using namespace testing_support;

class CheckpointKeep : public EngineTest {};

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

Tensor param(const Shape& shape, Generator& g, Device device) {
  return mul(randn(shape, DType::float32, g), 0.3).to(device).requires_grad_();
}

// A transformer-like block over x (T, C): causal attention of three projections (K = C),
// then an MLP up (K = C) and down (K = 4C), with residuals.
struct Block {
  static constexpr int64_t C = 8;
  Block(Device device, uint64_t seed) {
    Generator g(seed);
    wq = param({C, C}, g, device);
    wk = param({C, C}, g, device);
    wv = param({C, C}, g, device);
    up = param({C, 4 * C}, g, device);
    up_b = param({4 * C}, g, device);
    down = param({4 * C, C}, g, device);
    down_b = param({C}, g, device);
  }
  Tensor forward(const Tensor& x) const {
    const int64_t t = x.size(0);
    auto heads = [&](const Tensor& w) { return matmul(x, w).reshape({1, t, C}); };
    Tensor a = scaled_dot_product_attention(heads(wq), heads(wk), heads(wv), true);
    Tensor r = add(x, a.reshape({t, C}));
    Tensor h = gelu(linear(r, up, up_b), GeluApprox::tanh);
    return add(r, linear(h, down, down_b));
  }
  std::vector<Tensor> params() const { return {wq, wk, wv, up, up_b, down, down_b}; }
  Tensor wq, wk, wv, up, up_b, down, down_b;
};

struct Run {
  std::vector<std::vector<float>> results;  // loss, x's gradient, each parameter's
  uint64_t backward_tasks = 0;              // tasks queued by backward()
};

// Two blocks in a row, each plain (options undefined) or checkpointed with `options`.
Run run(Device device, const CheckpointOptions* options) {
  Block b(device, 4);
  Generator g(9);
  Tensor x = randn({6, Block::C}, DType::float32, g).to(device).requires_grad_();
  Tensor h = x;
  for (int i = 0; i < 2; ++i) {
    auto fn = [&b](const Tensor& in) { return b.forward(in); };
    h = options ? checkpoint(fn, h, {}, *options) : fn(h);
  }
  Tensor loss = sum(mul(h, h));
  const uint64_t before = Engine::get().stats().queued;
  loss.backward();
  Run r;
  r.backward_tasks = Engine::get().stats().queued - before;
  r.results = {values(loss), values(x.grad())};
  for (const Tensor& p : b.params()) r.results.push_back(values(p.grad()));
  return r;
}

void check_keeping(Device device) {
  const Run plain = run(device, nullptr);
  const CheckpointOptions all_recomputed;
  const Run full = run(device, &all_recomputed);
  const CheckpointOptions gemm = CheckpointOptions().gemms_min_k(4 * Block::C);
  const CheckpointOptions both = CheckpointOptions().gemms_min_k(4 * Block::C).attention();
  const CheckpointOptions every_gemm = CheckpointOptions().gemms_min_k(1);
  for (const CheckpointOptions* o : {&all_recomputed, &gemm, &both, &every_gemm})
    EXPECT_TRUE(run(device, o).results == plain.results)
        << "min_k " << o->keep_gemms_min_k << ", attention " << o->keep_attention;
  // Each block's recompute skips exactly what it kept: the down-projection (1 kernel), the
  // attention (1), every GEMM (3 projections, up, down).
  EXPECT_EQ(full.backward_tasks - run(device, &gemm).backward_tasks, 2u);
  EXPECT_EQ(full.backward_tasks - run(device, &both).backward_tasks, 4u);
  EXPECT_EQ(full.backward_tasks - run(device, &every_gemm).backward_tasks, 10u);
  EXPECT_GT(full.backward_tasks, plain.backward_tasks);
}

TEST_F(CheckpointKeep, KeptGemmsAndAttentionGiveThePlainBitsAndSkipTheirKernels) {
  check_keeping(Device::cpu());
}

TEST_F(CheckpointKeep, OnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_keeping(Device::cuda(8));
}

TEST_F(CheckpointKeep, AnOutputWrittenInPlaceIsRecomputedNotReused) {
  Generator g(2);
  const Tensor c1 = randn({4, 16}, DType::float32, g), c2 = randn({16, 4}, DType::float32, g);
  Tensor x = randn({4, 4}, DType::float32, g).requires_grad_();
  // m is a kept GEMM output (K = 16) that the function then doubles in place: reusing it in
  // the recompute would double it twice.
  auto fn = [&](const Tensor& in) {
    Tensor m = matmul(c1, c2);
    m.mul_(2.0);
    return mul(in, m);
  };
  sum(fn(x)).backward();
  const std::vector<float> want = values(x.grad());
  x.zero_grad();
  sum(checkpoint(fn, x, {}, CheckpointOptions().gemms_min_k(16))).backward();
  EXPECT_EQ(values(x.grad()), want);
}

TEST_F(CheckpointKeep, ARecomputeRunningOtherKeptOpsIsRefused) {
  Generator g(3);
  const Tensor w = randn({16, 4}, DType::float32, g).requires_grad_();
  Tensor x = randn({4, 16}, DType::float32, g).requires_grad_();
  const CheckpointOptions keep = CheckpointOptions().gemms_min_k(16);
  int calls = 0;
  // Fewer rows in the recompute: the kept output has another shape.
  Tensor y = sum(
      checkpoint([&](const Tensor& in) { return matmul(++calls == 1 ? in : in.slice(0, 2), w); }, x,
                 {w}, keep));
  EXPECT_TIDE_ERROR(y.backward(), "[checkpoint]", "'matmul' #1", "(2, 4)", "(4, 4)");
  // No GEMM at all in the recompute.
  calls = 0;
  Tensor z = sum(checkpoint([&](const Tensor& in) { return ++calls == 1 ? matmul(in, w) : in; }, x,
                            {w}, keep));
  EXPECT_TIDE_ERROR(z.backward(), "[checkpoint]", "ran 0 of the ops", "kept 1");
}

}  // namespace
}  // namespace tide
