// nn::GPT and its pieces (Embedding, CausalSelfAttention, MLP, Block): names and sizes,
// parity with PyTorch on a tiny model (golden values from tests/nn/gen_gpt_parity.py,
// float64), the same on the fake GPU, sampling, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "error_of.h"
#include "fake_gpu.h"
#include "gpt_rig.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace tide::nn {
namespace {

const std::string kData = TIDE_TEST_DATA_DIR;

// The tiny model of gen_gpt_parity.py.
GPTConfig tiny(DType dtype = DType::float64) { return test_util::tiny_gpt_config(dtype); }

// The batch file: ids, targets and PyTorch's loss, loaded as buffers of a plain module.
struct Batch : Module {
  Tensor ids, targets, loss;
  Batch() {
    ids = register_buffer("ids", zeros({2, 8}, DType::int64));
    targets = register_buffer("targets", zeros({2, 8}, DType::int64));
    loss = register_buffer("loss", zeros({}, DType::float64));
    load(*this, kData + "/gpt_parity_batch.safetensors");
  }
};

// Largest |a - b| / (atol + rtol |b|) over two same-named parameter lists: <= 1 passes.
double worst(const std::vector<std::pair<std::string, Tensor>>& got,
             const std::vector<std::pair<std::string, Tensor>>& want, double atol, double rtol,
             std::string* where) {
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    std::vector<double> a = cast(got[i].second, DType::float64).to_vector<double>();
    std::vector<double> b = want[i].second.to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j) {
      double e = std::abs(a[j] - b[j]) / (atol + rtol * std::abs(b[j]));
      if (!(e <= w)) {
        w = e;
        *where = got[i].first + "[" + std::to_string(j) + "]";
      }
    }
  }
  return w;
}

TEST(GPTModel, NamesAndSizesAreGPT2s) {
  GPT m(GPTConfig::char_model(65));
  // nanoGPT's character model: 0.80M parameters without the position embeddings.
  EXPECT_EQ(m.num_parameters(), 809856);
  EXPECT_EQ(m.num_parameters() - 64 * 128, 801664);
  std::vector<std::string> names;
  for (const auto& [k, t] : m.named_parameters()) names.push_back(k);
  ASSERT_EQ(names.size(), size_t(2 + 4 * 12 + 2));
  EXPECT_EQ(names[0], "transformer.wte.weight");
  EXPECT_EQ(names[1], "transformer.wpe.weight");
  EXPECT_EQ(names[2], "transformer.h.0.ln_1.weight");
  EXPECT_EQ(names[4], "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(names[13], "transformer.h.0.mlp.c_proj.bias");
  EXPECT_EQ(names.back(), "transformer.ln_f.bias");
  Tensor w = m.named_parameters()[4].second;
  EXPECT_EQ(w.shape(), Shape({128, 384}));  // (in, out), GPT-2's Conv1D layout
  // GPT-2's initialisation: std 0.02, and 0.02 / sqrt(2 * n_layer) for the projections.
  auto std_of = [](const Tensor& t) {
    std::vector<float> v = t.to_vector<float>();
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / double(v.size()));
  };
  EXPECT_NEAR(std_of(w), 0.02, 0.001);
  EXPECT_NEAR(std_of(m.named_parameters()[6].second), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_EQ(GPTConfig::gpt2_124m().n_embd, 768);
  EXPECT_EQ(GPT(GPTConfig::gpt2_124m()).num_parameters(), 124439808);
}

// Loss and every gradient equal PyTorch's (float64) from the same weights and batch.
void check_loss_and_grads(Device device) {
  GPT m(tiny());
  load(m, kData + "/gpt_parity_init.safetensors");
  m.to(device);
  Batch b;
  Tensor loss = m.loss(b.ids.to(device), b.targets.to(device));
  EXPECT_NEAR(loss.item<double>(), b.loss.item<double>(), 1e-12);
  loss.backward();
  GPT want(tiny());
  load(want, kData + "/gpt_parity_grads.safetensors");
  std::vector<std::pair<std::string, Tensor>> grads;
  for (const auto& [k, p] : m.named_parameters()) grads.emplace_back(k, p.grad().to(Device::cpu()));
  std::string where;
  EXPECT_LE(worst(grads, want.named_parameters(), 1e-12, 1e-9, &where), 1.0) << where;
}

TEST(GPTModel, LossAndGradientsMatchPyTorch) { check_loss_and_grads(Device::cpu()); }

TEST(GPTModel, LossAndGradientsMatchPyTorchOnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_loss_and_grads(Device::cuda(8));
}

// float32 parameters from the same float64 weights: the loss within float32 rounding.
// Three AdamW steps (weight decay on the 2-D weights only, gradients clipped to norm 0.5,
// which every step exceeds) from PyTorch's weights end at PyTorch's parameters.
TEST(GPTModel, ThreeClippedAdamWStepsMatchPyTorch) {
  GPT m(tiny());
  load(m, kData + "/gpt_parity_init.safetensors");
  Batch b;
  train::AdamW opt(train::decay_groups(m, 0.1),
                   train::AdamOptions(1e-2).betas(0.9, 0.95).eps(1e-8));
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    m.loss(b.ids, b.targets).backward();
    EXPECT_GT(opt.clip_grad_norm(0.5).item<double>(), 0.5);
    opt.step();
  }
  GPT want(tiny());
  load(want, kData + "/gpt_parity_step3.safetensors");
  std::string where;
  EXPECT_LE(worst(m.named_parameters(), want.named_parameters(), 1e-12, 1e-9, &where), 1.0)
      << where;
}

// The whole training step (forward, loss, backward, clipping, schedule, AdamW) traced equals
// eager bit for bit, step after step, and the loss goes down.
void check_traced_step(Device device) {
  auto run = [&](bool traced) {
    const auto batch = test_util::fixed_tiny_batch(device);
    test_util::GptSteps r = test_util::run_gpt_steps(
        tiny(DType::float32), device, 11,
        WarmupCosineOptions().lr(3e-3).min_lr(3e-4).warmup(2).decay_steps(8), 8, traced,
        [&](int) { return batch; });
    if (traced) {
      EXPECT_EQ(r.stats.traces, 1);
      EXPECT_EQ(r.stats.replays, 7);  // the call that traced replays too
    }
    return std::pair{r.losses, r.params};
  };
  auto [eager_losses, eager_params] = run(false);
  auto [traced_losses, traced_params] = run(true);
  EXPECT_EQ(eager_losses, traced_losses);
  EXPECT_TRUE(eager_params == traced_params) << "parameters differ after 8 steps";
  EXPECT_LT(eager_losses.back(), eager_losses.front() - 0.25f);
}

TEST(GPTModel, TracedTrainingStepEqualsEagerBitwise) { check_traced_step(Device::cpu()); }

TEST(GPTModel, TracedTrainingStepEqualsEagerBitwiseOnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_traced_step(Device::cuda(8));
}

TEST(GPTModel, Float32LossIsCloseToPyTorchs) {
  GPT m(tiny(DType::float32));
  GPT m64(tiny());
  load(m64, kData + "/gpt_parity_init.safetensors");
  {
    NoGrad ng;
    auto src = m64.named_parameters();
    auto dst = m.named_parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].second.copy_(cast(src[i].second, DType::float32));
  }
  Batch b;
  EXPECT_NEAR(m.loss(b.ids, b.targets).item<float>(), b.loss.item<double>(), 2e-6);
}

TEST(GPTModel, LogitsShapeAndCausality) {
  Generator gen(5);
  GPT m(tiny(DType::float32), gen);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4}, {2, 6});
  Tensor logits = m.forward(ids);
  EXPECT_EQ(logits.shape(), Shape({2, 6, 11}));
  // Changing the last token leaves the earlier positions' logits unchanged, bit for bit.
  Tensor ids2 = from_vector<int64_t>({1, 2, 3, 4, 5, 0, 7, 8, 1, 2, 3, 4}, {2, 6});
  std::vector<float> a = logits.to_vector<float>(), b = m.forward(ids2).to_vector<float>();
  for (size_t i = 0; i < 5 * 11; ++i) ASSERT_EQ(a[i], b[i]) << i;
  EXPECT_NE(std::vector<float>(a.begin() + 55, a.begin() + 66),
            std::vector<float>(b.begin() + 55, b.begin() + 66));
}

// Position by position through the KV cache, the logits are the full forward's at each
// position (float64: up to rounding of a different summation order).
TEST(GPTModel, KvCacheStepsGiveTheFullForwardsLogits) {
  GPT m(tiny());
  load(m, kData + "/gpt_parity_init.safetensors");
  m.eval();
  const std::vector<int64_t> ids{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};  // B = 2, T = 8
  std::vector<double> full = m.forward(from_vector<int64_t>(ids, {2, 8})).to_vector<double>();
  GPTCache cache;
  for (int64_t p = 0; p < 8; ++p) {
    Tensor step =
        m.forward_step(from_vector<int64_t>({ids[size_t(p)], ids[size_t(8 + p)]}, {2, 1}), cache);
    ASSERT_EQ(step.shape(), Shape({2, 11}));
    std::vector<double> v = step.to_vector<double>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < 11; ++j)
        EXPECT_NEAR(v[size_t(b * 11 + j)], full[size_t((b * 8 + p) * 11 + j)], 1e-12)
            << "batch " << b << " position " << p << " token " << j;
  }
  EXPECT_EQ(cache.len, 8);
  EXPECT_TIDE_ERROR(m.forward_step(zeros({2, 1}, DType::int64), cache), "[GPT]", "block_size");
  GPTCache other;
  EXPECT_TIDE_ERROR(m.forward_step(zeros({2, 2}, DType::int64), other), "[GPT]", "(2, 2)");
}

TEST(GPTModel, SamplingIsSeededAndStaysInTheVocabulary) {
  Generator init(7);
  GPT m(tiny(DType::float32), init);
  Generator g1(42), g2(42), g3(43);
  auto s1 = generate(m, {1, 2}, SampleOptions().tokens(20).top_k(5), g1);
  auto s2 = generate(m, {1, 2}, SampleOptions().tokens(20).top_k(5), g2);
  auto s3 = generate(m, {1, 2}, SampleOptions().tokens(20).temperature(0.7), g3);
  EXPECT_EQ(s1, s2);
  ASSERT_EQ(s1.size(), 22u);
  EXPECT_NE(s1, s3);
  for (int32_t t : s1) EXPECT_TRUE(t >= 0 && t < 11) << t;
  EXPECT_TRUE(m.is_training());  // restored
  EXPECT_TIDE_ERROR(generate(m, {}, SampleOptions()), "[generate]", "prompt");
  EXPECT_TIDE_ERROR(generate(m, {1}, SampleOptions().temperature(0)), "[generate]", "temperature");
}

TEST(GPTModel, Errors) {
  GPTConfig bad = tiny();
  bad.n_head = 3;
  EXPECT_TIDE_ERROR(GPT{bad}, "[GPT]", "n_head 3", "n_embd 16");
  bad = tiny();
  bad.dropout = 1.0;
  EXPECT_TIDE_ERROR(GPT{bad}, "[GPT]", "dropout");
  GPT m(tiny());
  EXPECT_TIDE_ERROR(m.forward(zeros({2, 9}, DType::int64)), "[GPT]", "9 tokens", "block_size");
  EXPECT_TIDE_ERROR(m.forward(zeros({2, 4})), "[GPT]", "(2, 4) float32");
  EXPECT_TIDE_ERROR(m.loss(zeros({2, 4}, DType::int64), zeros({2, 3}, DType::int64)), "[GPT]",
                    "(2, 3)", "(2, 4)");
  // A checkpoint of another shape is refused by name.
  GPTConfig wide = tiny();
  wide.n_embd = 32;
  GPT other(wide);
  EXPECT_TIDE_ERROR(load(other, kData + "/gpt_parity_init.safetensors"), "[load]",
                    "transformer.wte.weight");
  EXPECT_TIDE_ERROR(Embedding(0, 4), "[Embedding]");
  Embedding e(5, 3);
  EXPECT_TIDE_ERROR(e.forward(zeros({2})), "[Embedding]", "float32");
  EXPECT_EQ(e.forward(zeros({2, 4}, DType::int32)).shape(), Shape({2, 4, 3}));
}

}  // namespace
}  // namespace tide::nn
