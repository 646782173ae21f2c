// tide_bench, GPT: the training step of `tide gpt train --preset char` (nanoGPT's character
// model: 4 layers, 4 heads, width 128, context 64, batch 12, a 65-token vocabulary) on random
// token windows: forward, cross-entropy, backward, AdamW, waited for each step. Eager and
// traced (trace::function, one replay per step). Counters: tokens/s and the napkin GFLOP/s
// of the step (6 x parameters x tokens for the GEMMs plus the attention's 12 B H T^2 D).
// The PyTorch anchor is bench/peers/gpt_step.py (bench/peers/gpt_run.sh runs both).
#include <benchmark/benchmark.h>

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
BENCHMARK(BM_GptCharStep)->ArgName("traced")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
