// The Fashion-MNIST CNN of `tide train fashion-mnist --model cnn` (examples/cli/fashion_cnn.h)
// as benchmarks: one training step on a fixed minibatch of 128 random 28 x 28
// images -- zero_grad, forward, cross_entropy, backward, Adam (lr 1e-3), then wait_all and
// loss.item() -- eager and traced; where its time goes, per op; and each of its two
// convolutions alone (forward, input gradient, weight gradient) next to the per-sample
// GEMMs alone through cblas_sgemm (BM_CnnConvGemmFloor), the floor tide's CPU kernel is
// built on. The anchor for the convolutions themselves, PyTorch's oneDNN kernels, is timed
// by bench/peers/cnn_step.py --convs.
// bench/peers/cnn_step.py runs PyTorch's step on the same network; bench/peers/cnn_run.sh
// runs both in alternating rounds and prints the ratio. Part of tide_bench.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

#include "bench/step_profile.h"
#include "examples/cli/fashion_cnn.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/optimizer.h"

namespace {

using tide::Tensor;

constexpr int64_t kCnnBatch = 128, kSide = 28, kClasses = 10;
constexpr double kCnnLr = 1e-3;

Tensor labels() {
  std::vector<int64_t> v(kCnnBatch);
  for (int64_t i = 0; i < kCnnBatch; ++i) v[size_t(i)] = i % kClasses;
  return tide::from_vector(v, {kCnnBatch});
}

struct CnnSetup {
  tide::Generator gen{7};
  std::shared_ptr<tide::nn::Sequential> net = tide::examples::fashion_cnn(kSide, kSide, gen);
  tide::train::Adam opt{net->parameters(), tide::train::AdamOptions(kCnnLr)};
  Tensor x = tide::randn({kCnnBatch, 1, kSide, kSide}, tide::DType::float32, gen);
  Tensor y = labels();  // 0..9 in turn: the step's cost does not depend on which

  Tensor step() {
    opt.zero_grad();
    Tensor loss = tide::nn::cross_entropy((*net)(x), y);
    loss.backward();
    opt.step();
    return loss.detach();
  }
};

// Arg: 0 eager, 1 traced (trace::function; its first call runs eagerly to make Adam's
// moments, the second captures). Google Benchmark calls this function afresh for each
// iteration count it tries and each repetition, so both of those calls run here, untimed,
// before the loop: the capture is not a step's cost.
void BM_CnnStep(benchmark::State& state) {
  CnnSetup s;
  auto traced = tide::trace::function([&s] { return s.step(); }, {.name = "cnn_step"});
  const bool trace = state.range(0) != 0;
  for (int i = 0; i < 2; ++i) (trace ? traced() : s.step()).wait_to_read();
  tide::wait_all();
  float loss = 0;
  for (auto _ : state) {
    Tensor l = trace ? traced() : s.step();
    tide::wait_all();
    loss = l.item<float>();
  }
  state.counters["loss"] = loss;
  state.counters["threads"] = tide::num_threads();
}
BENCHMARK(BM_CnnStep)
    ->ArgName("traced")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_CnnStepProfile(benchmark::State& state) {
  CnnSetup s;
  s.step();
  tide::wait_all();
  tide_bench::StepProfile prof({"conv2d", "conv2d_input_grad", "conv2d_weight_grad"});
  for (auto _ : state) {
    prof.begin();
    s.step();
    tide::wait_all();
    state.SetIterationTime(prof.end());
  }
  prof.report(state, "conv");
}
BENCHMARK(BM_CnnStepProfile)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- each convolution alone --------------------------------------------------------------

// The CNN's two convolutions (3x3, pad 1, stride 1) at batch 128.
struct ConvShape {
  int64_t c, o, side;
};
constexpr ConvShape kConvs[] = {{1, 32, 28}, {32, 64, 14}};

// The rate of one pass (each pass of a conv has the same FLOP count) at batch 128.
void set_conv_gflops(benchmark::State& state, const ConvShape& cs) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(kCnnBatch * cs.o * cs.c * 9 * cs.side * cs.side) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// Args: {conv index, pass: 0 forward, 1 input gradient, 2 weight gradient}.
void BM_CnnConv(benchmark::State& state) {
  const ConvShape cs = kConvs[state.range(0)];
  tide::Generator gen{3};
  Tensor x = tide::randn({kCnnBatch, cs.c, cs.side, cs.side}, tide::DType::float32, gen);
  Tensor w = tide::randn({cs.o, cs.c, 3, 3}, tide::DType::float32, gen);
  Tensor dy = tide::randn({kCnnBatch, cs.o, cs.side, cs.side}, tide::DType::float32, gen);
  const auto opt = tide::Conv2dOptions().padding(1);
  tide::wait_all();
  for (auto _ : state) {
    Tensor r;
    switch (state.range(1)) {
      case 0: r = tide::conv2d(x, w, Tensor(), opt); break;
      case 1: r = tide::conv2d_input_grad(dy, w, x.shape(), opt); break;
      default: r = tide::conv2d_weight_grad(dy, x, w.shape(), opt); break;
    }
    tide::wait_all();
    benchmark::DoNotOptimize(r);
  }
  set_conv_gflops(state, cs);
}
BENCHMARK(BM_CnnConv)
    ->ArgNames({"conv", "pass"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The floor under BM_CnnConv: the same per-sample GEMMs through cblas_sgemm on ready-made
// columns (no im2col, col2im or tide), 128 per pass, as the CPU kernel calls them:
//   forward      y_n (O x OHW)  = w (O x K) @ col_n (K x OHW)
//   input grad   col_n (K x OHW) = w^T (K x O) @ dy_n (O x OHW)
//   weight grad  dw (O x K)     += dy_n (O x OHW) @ col_n^T (OHW x K)
// with K = C * 9. What BM_CnnConv takes beyond it is im2col / col2im and the hand-offs.
void BM_CnnConvGemmFloor(benchmark::State& state) {
  const ConvShape cs = kConvs[state.range(0)];
  const int o = int(cs.o), k = int(cs.c * 9), ohw = int(cs.side * cs.side);
  std::vector<float> w(size_t(o) * k, 0.01f), col(size_t(k) * ohw, 0.02f),
      y(size_t(o) * ohw, 0.03f), dw(size_t(o) * k);
  for (auto _ : state) {
    for (int64_t n = 0; n < kCnnBatch; ++n) switch (state.range(1)) {
        case 0:
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, o, ohw, k, 1.0f, w.data(), k,
                      col.data(), ohw, 0.0f, y.data(), ohw);
          break;
        case 1:
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, ohw, o, 1.0f, w.data(), k,
                      y.data(), ohw, 0.0f, col.data(), ohw);
          break;
        default:
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, o, k, ohw, 1.0f, y.data(), ohw,
                      col.data(), ohw, n == 0 ? 0.0f : 1.0f, dw.data(), k);
          break;
      }
    benchmark::DoNotOptimize(dw.data());
    benchmark::DoNotOptimize(col.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_conv_gflops(state, cs);
}
BENCHMARK(BM_CnnConvGemmFloor)
    ->ArgNames({"conv", "pass"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
