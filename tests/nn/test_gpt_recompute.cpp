// Activation recomputation in GPT (nn::checkpoint, GPTConfig::recompute, selective too): a block
// with dropout in training gives the same loss and gradients bit for bit; whole training steps
// (AdamW, clipping, schedule) with dropout give the same losses and parameters, eager and traced,
// on the CPU and on the fake GPU; and the allocator's peak during forward and backward of a few
// blocks, and a traced training step's planned arena, are lower by most of the activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fake_gpu.h"
#include "gpt_rig.h"
#include "nn/nn.h"
#include "tide.h"

namespace tide::nn {
namespace {

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

// The loss, the input's gradient and every parameter's gradient of one forward and backward
// of `blocks` in a row (each checkpointed or not) over x, with a sum-of-squares loss.
std::vector<std::vector<float>> block_run(const std::vector<std::shared_ptr<Block>>& blocks,
                                          const Tensor& x0, bool recompute) {
  for (auto& b : blocks)
    for (Tensor p : b->parameters()) p.zero_grad();
  Tensor x = x0.detach().requires_grad_();
  Tensor h = x;
  for (auto& b : blocks) h = recompute ? checkpoint(b, h) : b->forward(h);
  Tensor loss = sum(mul(h, h));
  loss.backward();
  std::vector<std::vector<float>> r{host(loss), host(x.grad())};
  for (auto& b : blocks)
    for (const Tensor& p : b->parameters()) r.push_back(host(p.grad()));
  return r;
}

void check_block_with_dropout(Device device) {
  Generator gen(5);
  std::vector<std::shared_ptr<Block>> blocks;
  for (int i = 0; i < 2; ++i) {
    blocks.push_back(std::make_shared<Block>(BlockOptions(16, 2).n_layer(2).dropout(0.2), gen));
    blocks.back()->to(device);
  }
  Generator data(7);
  Tensor x = randn({2, 8, 16}, DType::float32, data).to(device);
  gen.manual_seed(11);  // the blocks' dropouts draw from gen
  auto plain = block_run(blocks, x, false);
  const uint64_t offset = gen.offset();
  gen.manual_seed(11);
  auto recomputed = block_run(blocks, x, true);
  EXPECT_EQ(gen.offset(), offset);
  ASSERT_EQ(plain.size(), recomputed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], recomputed[i]) << "result " << i;
  // Dropout did act: eval mode gives another loss.
  for (auto& b : blocks) b->eval();
  EXPECT_NE(block_run(blocks, x, true)[0], plain[0]);
}

TEST(GPTRecompute, BlocksWithDropoutGiveTheSameLossAndGradientsBitwise) {
  check_block_with_dropout(Device::cpu());
}

TEST(GPTRecompute, BlocksWithDropoutOnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_block_with_dropout(Device::cuda(8));
}

GPTConfig tiny(bool recompute, bool last_block = true, bool selective = false) {
  GPTConfig c = test_util::tiny_gpt_config(DType::float32);
  c.recompute_last_block = last_block;
  c.dropout = 0.1;
  c.recompute = recompute;
  if (selective) c.selective_recompute();
  return c;
}

// The nodes named `op` in the graph behind t.
int count_nodes(const Tensor& t, const char* op) {
  std::vector<autograd::Node*> stack{t.impl().grad_fn.get()}, seen = stack;
  int n = 0;
  while (!stack.empty()) {
    autograd::Node* node = stack.back();
    stack.pop_back();
    n += std::string(node->op) == op;
    for (const autograd::Edge& e : node->next)
      if (e.fn && std::find(seen.begin(), seen.end(), e.fn.get()) == seen.end()) {
        seen.push_back(e.fn.get());
        stack.push_back(e.fn.get());
      }
  }
  return n;
}

TEST(GPTRecompute, TheConfigFlagCheckpointsEveryBlock) {
  Tensor x = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {1, 6});
  GPT plain(tiny(false)), recomputed(tiny(true));
  EXPECT_EQ(count_nodes(plain.loss(x, x), "checkpoint"), 0);
  Tensor loss = recomputed.loss(x, x);
  EXPECT_EQ(count_nodes(loss, "checkpoint"), 2);
  // Nothing of the blocks is recorded: the attention nodes are gone with them.
  EXPECT_EQ(count_nodes(loss, "scaled_dot_product_attention"), 0);
  EXPECT_EQ(count_nodes(plain.loss(x, x), "scaled_dot_product_attention"), 2);
  // recompute_last_block = false: the last block records its ops as usual.
  GPT keep_last(tiny(true, false));
  Tensor l = keep_last.loss(x, x);
  EXPECT_EQ(count_nodes(l, "checkpoint"), 1);
  EXPECT_EQ(count_nodes(l, "scaled_dot_product_attention"), 1);
  // Selective: the same blocks checkpointed, keeping the MLP's down-projection (K = 4C) and
  // the attention.
  const GPTConfig sel = tiny(false, true, true);
  EXPECT_TRUE(sel.recompute && !sel.recompute_last_block);
  EXPECT_EQ(sel.recompute_keep.keep_gemms_min_k, 4 * sel.n_embd);
  EXPECT_TRUE(sel.recompute_keep.keep_attention);
  GPT selective(sel);
  EXPECT_EQ(count_nodes(selective.loss(x, x), "checkpoint"), 1);
}

// Six AdamW steps (clipped, scheduled), each step's loss and then every parameter.
std::vector<float> train(Device device, bool recompute, bool traced, bool last_block = true,
                         bool selective = false) {
  const auto batch = test_util::fixed_tiny_batch(device);
  test_util::GptSteps r =
      test_util::run_gpt_steps(tiny(recompute, last_block, selective), device, 11,
                               WarmupCosineOptions().lr(3e-3).min_lr(3e-4).warmup(2).decay_steps(6),
                               6, traced, [&](int) { return batch; });
  if (traced) {
    EXPECT_EQ(r.stats.traces, 1);
    EXPECT_EQ(r.stats.replays, 5);
  }
  EXPECT_LT(r.losses.back(), r.losses.front());
  std::vector<float> out = r.losses;
  out.insert(out.end(), r.params.begin(), r.params.end());
  return out;
}

void check_training(Device device) {
  const std::vector<float> plain = train(device, false, false);
  EXPECT_TRUE(train(device, true, false) == plain) << "eager with recompute";
  EXPECT_TRUE(train(device, true, true) == plain) << "traced with recompute";
  EXPECT_TRUE(train(device, true, true, false) == plain) << "traced, the last block kept";
  EXPECT_TRUE(train(device, true, false, false, true) == plain) << "eager, selective";
  EXPECT_TRUE(train(device, true, true, false, true) == plain) << "traced, selective";
}

TEST(GPTRecompute, TrainingStepsEagerAndTracedEqualThePlainStepsBitwise) {
  check_training(Device::cpu());
}

TEST(GPTRecompute, TrainingStepsEagerAndTracedOnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_training(Device::cuda(8));
}

// The allocator's peak over forward and backward of four blocks, above what was active
// before (the blocks' parameters and the input). Synchronous engine: each op runs at the
// call, so the peak is the program's, not the queue's.
size_t peak_above_start(bool recompute, const CheckpointOptions& keep = {}) {
  Engine& e = Engine::get();
  const bool was_sync = e.synchronous();
  e.set_synchronous(true);
  Generator gen(3);
  std::vector<std::shared_ptr<Block>> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(std::make_shared<Block>(BlockOptions(32, 4), gen));
  Tensor x = randn({16, 64, 32}, DType::float32, gen).requires_grad_();
  wait_all();
  Allocator& a = Allocator::get();
  const size_t start = a.stats().active_bytes;
  a.reset_peak();
  {
    Tensor h = x;
    for (auto& b : blocks) h = recompute ? checkpoint(b, h, keep) : b->forward(h);
    sum(mul(h, h)).backward();
  }
  wait_all();
  const size_t peak = a.stats().peak_bytes;
  e.set_synchronous(was_sync);
  return peak - start;
}

TEST(GPTRecompute, CheckpointedBlocksPeakLowerInBytes) {
  const size_t plain = peak_above_start(false);
  const size_t recomputed = peak_above_start(true);
  // Plain keeps every block's activations (many times the 128 KiB input per block); with
  // recompute only the block inputs stay, and one block's activations during its backward.
  // The gradients of the parameters (about 50 KiB a block) are in both.
  EXPECT_GT(plain, size_t(4) << 20) << "four blocks' activations";
  EXPECT_LT(double(recomputed), 0.5 * double(plain))
      << "plain " << plain << " bytes, recomputed " << recomputed << " bytes";
  // Keeping each block's down-projection and attention output (2 of the block's rows of
  // width 32 per token, against about 16 in all) holds more than recomputing everything
  // and still far less than plain.
  const size_t selective =
      peak_above_start(true, CheckpointOptions().gemms_min_k(4 * 32).attention());
  EXPECT_GT(selective, recomputed);
  EXPECT_LT(double(selective), 0.6 * double(plain))
      << "plain " << plain << " bytes, selective " << selective << " bytes";
}

// A traced training step's plan: with the blocks recomputed, the forward's intermediates
// die inside the forward, and the arena the planner lays out shrinks by most of them.
size_t traced_arena(bool recompute) {
  GPTConfig c = tiny(recompute);
  c.n_layer = 4;
  c.n_embd = 32;
  c.block_size = 32;
  test_util::GptRig rig(c, Device::cpu(), 5,
                        WarmupCosineOptions().lr(1e-3).min_lr(1e-4).warmup(1).decay_steps(4));
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return rig.step(x, y); },
                           {.name = "gpt_step", .warmup_calls = 1});
  Generator data(2);
  Tensor x = cast(mul(rand({8, 32}, DType::float32, data), 11.0), DType::int64);
  for (int i = 0; i < 2; ++i) f(x, x).item<float>();
  EXPECT_EQ(f.stats().traces, 1);
  return f.stats().arena_bytes;
}

TEST(GPTRecompute, TracedStepsArenaIsSmallerInBytes) {
  const size_t plain = traced_arena(false), recomputed = traced_arena(true);
  EXPECT_GT(plain, size_t(1) << 20);
  EXPECT_LT(double(recomputed), 0.6 * double(plain))
      << "plain " << plain << " bytes, recomputed " << recomputed << " bytes";
}

}  // namespace
}  // namespace tide::nn
