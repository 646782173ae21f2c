// tide_bench, GPT: the training step of `tide gpt train --preset char` (nanoGPT's character
// model: 4 layers, 4 heads, width 128, context 64, batch 12, a 65-token vocabulary) on random
// token windows: forward, cross-entropy, backward, AdamW, waited for each step. Eager and
// traced (trace::function, one replay per step). Counters: tokens/s and the napkin GFLOP/s
// of the step (6 x parameters x tokens for the GEMMs plus the attention's 12 B H T^2 D).
// The PyTorch anchor is bench/peers/gpt_step.py (bench/peers/gpt_run.sh runs both).
// BM_GptCharGemms: the step's 51 GEMMs alone (per layer c_attn, attn.c_proj, c_fc, mlp.c_proj
// forward, and each one's dX and dW; the tied head's three), through tide's matmul (queued,
// waited once), cblas_sgemm directly on the calling thread, or oneDNN's dnnl_sgemm directly
// on its own OpenMP threads (where tide's float GEMMs use it): tide's GEMM rate against the
// library's own on the same shapes, and the GEMM floor of the step.
#include <benchmark/benchmark.h>
#include <cblas.h>
#if TIDE_BENCH_SGEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <memory>
#include <vector>

#include "nn/nn.h"
#include "tide.h"
#include "train/optimizer.h"

namespace {

using tide::Tensor;

constexpr int64_t kB = 12, kT = 64, kVocab = 65;

// Args: traced (1) or eager (0).
void BM_GptCharStep(benchmark::State& state) {
  const bool traced = state.range(0) != 0;
  tide::Generator gen(1);
  tide::nn::GPT model(tide::nn::GPTConfig::char_model(kVocab), gen);
  tide::train::AdamW opt(model.parameters(), tide::train::AdamOptions(1e-3).weight_decay(0.1));
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = model.loss(x, y);
    loss.backward();
    opt.step();
    return loss.detach();
  };
  auto traced_step = tide::trace::function(step, {.name = "gpt_step", .warmup_calls = 1});
  auto batch = [&] {
    return tide::cast(tide::mul(tide::rand({kB, kT}, tide::DType::float32, gen), double(kVocab)),
                      tide::DType::int64);
  };
  Tensor x = batch(), y = batch();
  tide::wait_all();
  for (auto _ : state) {
    Tensor loss = traced ? traced_step(x, y) : step(x, y);
    loss.item<float>();
  }
  const double params = double(model.num_parameters());
  const double flops = 6.0 * params * kB * kT + 12.0 * kB * 4 * kT * kT * 32 * 4;
  state.counters["tokens/s"] =
      benchmark::Counter(double(kB * kT), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (traced) {
    const tide::trace::FunctionStats st = traced_step.stats();
    state.counters["traces"] = double(st.traces);
    state.counters["replays"] = double(st.replays);
    state.counters["kernels"] = double(st.kernels);
  }
  state.SetLabel(traced ? "traced" : "eager");
}
BENCHMARK(BM_GptCharStep)
    ->ArgName("traced")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One GEMM of the step: c (m x n) = op(a) @ op(b).
struct StepGemm {
  bool ta, tb;
  int m, n, k;
};

std::vector<StepGemm> char_step_gemms() {
  constexpr int kTok = int(kB * kT), kC = 128;
  std::vector<StepGemm> g;
  auto linear = [&](int in, int out) {
    g.push_back({false, false, kTok, out, in});  // y = x W
    g.push_back({false, true, kTok, in, out});   // dx = dy W^T
    g.push_back({true, false, in, out, kTok});   // dW = x^T dy
  };
  for (int layer = 0; layer < 4; ++layer) {
    linear(kC, 3 * kC);
    linear(kC, kC);
    linear(kC, 4 * kC);
    linear(4 * kC, kC);
  }
  g.push_back({false, true, kTok, int(kVocab), kC});   // logits = x wte^T
  g.push_back({false, false, kTok, kC, int(kVocab)});  // dx = dlogits wte
  g.push_back({true, false, int(kVocab), kC, kTok});   // dwte = dlogits^T x
  return g;
}

// Args: through tide (1), through tide in bfloat16 (2: operands cast once, outside the loop;
// ops/cpu/half_gemm.h), cblas_sgemm directly (0) or dnnl_sgemm directly (3; skipped in a
// build whose float GEMMs are not oneDNN's).
void BM_GptCharGemms(benchmark::State& state) {
  const bool through_tide = state.range(0) == 1 || state.range(0) == 2;
  const bool bf16 = state.range(0) == 2;
  const bool onednn = state.range(0) == 3;
#if !TIDE_BENCH_SGEMM_ONEDNN
  if (onednn) {
    state.SkipWithError("float GEMMs are not oneDNN's in this build (TIDE_BLAS)");
    return;
  }
#endif
  const std::vector<StepGemm> gemms = char_step_gemms();
  tide::Generator gen(2);
  std::vector<Tensor> as, bs;
  std::vector<std::vector<float>> ha, hb, hc;
  double flops = 0;
  for (const StepGemm& g : gemms) {
    const tide::Shape sa = g.ta ? tide::Shape{g.k, g.m} : tide::Shape{g.m, g.k};
    const tide::Shape sb = g.tb ? tide::Shape{g.n, g.k} : tide::Shape{g.k, g.n};
    as.push_back(tide::mul(tide::randn(sa, tide::DType::float32, gen), 0.1));
    bs.push_back(tide::mul(tide::randn(sb, tide::DType::float32, gen), 0.1));
    ha.push_back(as.back().to_vector<float>());
    hb.push_back(bs.back().to_vector<float>());
    if (bf16) {
      as.back() = tide::cast(as.back(), tide::DType::bfloat16);
      bs.back() = tide::cast(bs.back(), tide::DType::bfloat16);
    }
    hc.emplace_back(size_t(g.m) * size_t(g.n));
    flops += 2.0 * g.m * g.n * g.k;
  }
  for (auto _ : state) {
    if (through_tide) {
      std::vector<Tensor> outs;
      for (size_t i = 0; i < gemms.size(); ++i)
        outs.push_back(
            tide::matmul(as[i], bs[i], {.trans_a = gemms[i].ta, .trans_b = gemms[i].tb}));
      tide::wait_all();
    } else if (onednn) {
#if TIDE_BENCH_SGEMM_ONEDNN
      for (size_t i = 0; i < gemms.size(); ++i) {
        const StepGemm& g = gemms[i];
        dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, 1.0f, ha[i].data(),
                   g.ta ? g.m : g.k, hb[i].data(), g.tb ? g.k : g.n, 0.0f, hc[i].data(), g.n);
      }
      benchmark::ClobberMemory();
#endif
    } else {
      for (size_t i = 0; i < gemms.size(); ++i) {
        const StepGemm& g = gemms[i];
        cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans,
                    g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, ha[i].data(),
                    g.ta ? g.m : g.k, hb[i].data(), g.tb ? g.k : g.n, 0.0f, hc[i].data(), g.n);
      }
      benchmark::ClobberMemory();
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gemms"] = double(gemms.size());
  state.SetLabel(bf16           ? "tide matmul bfloat16"
                 : through_tide ? "tide matmul"
                 : onednn       ? "dnnl_sgemm"
                                : "cblas_sgemm");
}
BENCHMARK(BM_GptCharGemms)
    ->ArgName("tide")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
