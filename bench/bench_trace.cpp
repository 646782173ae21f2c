// Traced-mode benchmarks: the replay's cost per node, the textbook's 10 000 x
// (y = y + 1) eager and traced (unrolled, loop node, fused), and the textbook MLP's training
// step eager vs traced with the bytes each holds. Part of tide_bench (main is in
// bench_tide.cpp). Every iteration ends with the result read on the host, so the timed
// work has run.
//
// Also: a replay of four independent towers of small ops with streams = 1 and 2 (the
// branch-parallel executor, trace/cpu/parallel.h).
//
// Targets: replay <= 30 ns per node (10 000 tiny adds, unfused); traced 10 000 x
// y + 1 (loop node or fused) >= 50x faster than eager with one sync at the end; traced MLP
// step <= eager step, with a lower peak. Ratios are taken from medians of the same run
// (bench/summarize.py).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "nn/nn.h"
#include "tide.h"
#include "train/optimizer.h"

namespace {

using tide::Tensor;
namespace trace = tide::trace;

constexpr int kChain = 10000;

Tensor add_chain(const Tensor& x) {
  Tensor y = x;
  for (int i = 0; i < kChain; ++i) y = y + 1.0;
  return y;
}

// ---- 10 000 x (y = y + 1) on a 1x2 tensor ----------------------------------------------

void BM_ChainEagerOneSync(benchmark::State& state) {
  Tensor x = tide::ones({1, 2});
  for (auto _ : state) add_chain(x).wait_to_read();
  state.SetItemsProcessed(state.iterations() * kChain);
}
BENCHMARK(BM_ChainEagerOneSync)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Replay of the unrolled trace: 10 000 nodes, one engine task. Time per item = per node.
void BM_ChainTracedUnrolled(benchmark::State& state) {
  auto f = trace::function(add_chain, {.name = "unrolled"});
  Tensor x = tide::ones({1, 2});
  f(x).wait_to_read();  // traces
  for (auto _ : state) f(x).wait_to_read();
  state.SetItemsProcessed(state.iterations() * kChain);
  state.counters["nodes"] = f.stats().kernels;
}
BENCHMARK(BM_ChainTracedUnrolled)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_ChainTracedFused(benchmark::State& state) {
  auto f = trace::function(add_chain, {.name = "fused", .fusion = trace::Fusion::elementwise});
  Tensor x = tide::ones({1, 2});
  f(x).wait_to_read();
  for (auto _ : state) f(x).wait_to_read();
  state.SetItemsProcessed(state.iterations() * kChain);
  state.counters["kernels"] = f.stats().kernels;
}
BENCHMARK(BM_ChainTracedFused)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Arg 0: fusion none (the body replayed n times); 1: elementwise (the body is one fused
// kernel the loop iterates in registers, all n iterations per block).
void BM_ChainTracedLoopNode(benchmark::State& state) {
  auto f = trace::function(
      [](const Tensor& x) {
        return trace::loop(
            kChain, [](const Tensor& y) { return y + 1.0; }, x);
      },
      {.name = "loop",
       .fusion = state.range(0) ? trace::Fusion::elementwise : trace::Fusion::none});
  Tensor x = tide::ones({1, 2});
  f(x).wait_to_read();
  for (auto _ : state) f(x).wait_to_read();
  state.SetItemsProcessed(state.iterations() * kChain);
}
BENCHMARK(BM_ChainTracedLoopNode)
    ->ArgName("fused")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- parallel branches: four independent towers of small ops ----------------------------

// Each tower: 8 x (64x64 matmul, bias add, tanh) on a 64-row batch, every op too small for
// the intra-op pool; the towers are summed at the end. Arg: Options::streams.
void BM_TowersReplay(benchmark::State& state) {
  constexpr int kTowers = 4, kLayers = 8;
  std::vector<Tensor> w, b;
  for (int t = 0; t < kTowers; ++t) {
    w.push_back(tide::randn({64, 64}) * 0.1);
    b.push_back(tide::randn({64}) * 0.1);
  }
  auto towers = [&](const Tensor& x) {
    Tensor total;
    for (int t = 0; t < kTowers; ++t) {
      Tensor h = x;
      for (int l = 0; l < kLayers; ++l)
        h = tide::tanh(tide::matmul(h, w[size_t(t)]) + b[size_t(t)]);
      total = total.defined() ? total + h : h;
    }
    return total;
  };
  auto f = trace::function(towers, {.name = "towers", .streams = int(state.range(0))});
  Tensor x = tide::randn({64, 64});
  f(x).wait_to_read();
  for (auto _ : state) f(x).wait_to_read();
  auto s = f.stats();
  state.counters["nodes"] = s.kernels;
  state.counters["critical_path"] = s.critical_path;
  state.counters["arena_KB"] = double(s.arena_bytes) / 1024.0;
}
BENCHMARK(BM_TowersReplay)
    ->ArgName("streams")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- the textbook MLP's training step, eager vs traced -----------------------------------

constexpr int64_t kBatch = 1024, kIn = 512, kH1 = 2048, kH2 = 512;

struct MlpRig {
  tide::Generator gen{42};
  std::shared_ptr<tide::nn::Sequential> net = std::make_shared<tide::nn::Sequential>(
      std::initializer_list<std::shared_ptr<tide::nn::Module>>{
          std::make_shared<tide::nn::Linear>(tide::nn::LinearOptions(kIn, kH1), gen),
          std::make_shared<tide::nn::ReLU>(),
          std::make_shared<tide::nn::Linear>(tide::nn::LinearOptions(kH1, kH2), gen),
          std::make_shared<tide::nn::ReLU>(),
          std::make_shared<tide::nn::Linear>(tide::nn::LinearOptions(kH2, 1), gen)});
  tide::train::SGD opt{net->parameters(), tide::train::SGDOptions(0.005)};
  Tensor x = tide::randn({kBatch, kIn}, tide::DType::float32, gen);
  Tensor y = tide::ones({kBatch, 1});

  Tensor step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = tide::nn::l2_loss((*net)(x), y);
    loss.backward();
    opt.step();
    return loss;
  }
};

// Peak allocator bytes above the steady state during one step (run synchronously, one op
// at a time, so the peak is the step's own).
template <class Step>
size_t step_peak(Step&& run) {
  tide::wait_all();
  tide::Allocator& a = tide::Allocator::get();
  size_t base = a.stats().active_bytes;
  a.reset_peak();
  run();
  tide::wait_all();
  return a.stats().peak_bytes - base;
}

void BM_TextbookStepEager(benchmark::State& state) {
  MlpRig r;
  r.step(r.x, r.y).wait_to_read();
  for (auto _ : state) {
    Tensor loss = r.step(r.x, r.y);
    tide::wait_all();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  state.counters["peak_MB"] = double(step_peak([&] { r.step(r.x, r.y); })) / 1048576.0;
}
BENCHMARK(BM_TextbookStepEager)->UseRealTime()->Unit(benchmark::kMillisecond);

// Arg: Options::streams (2: independent nodes, e.g. the per-parameter updates, overlap).
void BM_TextbookStepTraced(benchmark::State& state) {
  MlpRig r;
  auto f =
      trace::function([&](const Tensor& x, const Tensor& y) { return r.step(x, y); },
                      {.name = "train_step", .warmup_calls = 1, .streams = int(state.range(0))});
  f(r.x, r.y).wait_to_read();  // eager warm-up (creates the gradients)
  f(r.x, r.y).wait_to_read();  // traces
  for (auto _ : state) {
    Tensor loss = f(r.x, r.y);
    tide::wait_all();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  auto s = f.stats();
  // The arena is allocated once, at the trace: count it with what a replay allocates.
  state.counters["peak_MB"] = double(s.arena_bytes + step_peak([&] { f(r.x, r.y); })) / 1048576.0;
  state.counters["planned_MB"] = double(s.arena_bytes + s.output_bytes) / 1048576.0;
  state.counters["unplanned_MB"] = double(s.unplanned_bytes) / 1048576.0;
  state.counters["nodes"] = s.kernels;
}
BENCHMARK(BM_TextbookStepTraced)
    ->ArgName("streams")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
