// The textbook MLP benchmarks: one eager training step of
//   Linear(512, 2048) + ReLU, Linear(2048, 512) + ReLU, Linear(512, 1), nn::l2_loss, SGD lr
//   0.005, batch 1024, X ~ N(0, 1) (1024x512), y = 1,
// next to the limit measured in the same run -- the step's GEMMs alone through cblas_sgemm --
// and the trainer's sync policies' throughput on the same model. bench_torch.cpp runs the
// same step in libtorch. Part of tide_bench (main is in bench_tide.cpp).
//
// The GEMMs of one step, row-major, tide's layout (weights stored (in, out), y = x W + b).
// Layers: Z1 = X W1, A1 = relu(Z1 + b1); Z2 = A1 W2, A2 = relu(Z2 + b2); Z3 = A2 W3 + b3.
//   forward   fwd1  Z1  = X   W1      1024 x 2048 x  512   2.15 GFLOP
//             fwd2  Z2  = A1  W2      1024 x  512 x 2048   2.15 GFLOP
//             fwd3  Z3  = A2  W3      1024 x    1 x  512   1 MFLOP
//   backward  dW3       = A2^T dZ3     512 x    1 x 1024   1 MFLOP
//             dA2       = dZ3  W3^T   1024 x  512 x    1   1 MFLOP (an outer product)
//             dW2       = A1^T dZ2    2048 x  512 x 1024   2.15 GFLOP
//             dA1       = dZ2  W2^T   1024 x 2048 x  512   2.15 GFLOP
//             dW1       = X^T  dZ1     512 x 2048 x 1024   2.15 GFLOP
// (M x N x K). That is 8 GEMMs, 5 of them large: 10.74 GFLOP per step. X is not a
// parameter, so dX = dZ1 W1^T (1024 x 512 x 2048, another 2.15 GFLOP) is not needed; it is
// timed separately (BM_TextbookGemmFloor/with_dX) because tide's matmul backward computes
// both operands' gradients whether or not they are needed.
//
// Not here: the elementwise work's own floor (bias adds, ReLU and its mask, bias-gradient
// sums, the SGD updates); the GEMM-only floor is what the target is stated against.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/step_profile.h"
#include "bench/textbook_mlp.h"
#include "core/blas_threads.h"  // the BLAS's thread count, whichever library TIDE_BLAS chose
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace {

using tide::Tensor;

using namespace tide_bench;  // kBatch, kIn, kH1, kH2, kOut, kLr, textbook_mlp
constexpr uint64_t kSeed = 42;

// FLOPs of the 8 GEMMs a step needs (see the table above).
constexpr double kStepGemmFlop =
    2.0 * (double(kBatch) * kH1 * kIn + double(kBatch) * kH2 * kH1 + double(kBatch) * kOut * kH2 +
           double(kH2) * kOut * kBatch + double(kBatch) * kH2 * kOut + double(kH1) * kH2 * kBatch +
           double(kBatch) * kH1 * kH2 + double(kIn) * kH1 * kBatch);

void set_step_gflops(benchmark::State& state) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(kStepGemmFlop / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Sets tide's intra-op pool and OpenBLAS's thread counts for one benchmark and restores them
// after; 0 leaves a setting as tide chose it at startup.
class ThreadConfig {
 public:
  ThreadConfig(int pool, int blas) : pool_(tide::num_threads()), blas_(tide::blas_num_threads()) {
    if (pool > 0) tide::set_num_threads(pool);
    if (blas > 0) tide::set_blas_num_threads(blas);
  }
  ~ThreadConfig() {
    tide::wait_all();
    tide::set_num_threads(pool_);
    tide::set_blas_num_threads(blas_);
  }
  ThreadConfig(const ThreadConfig&) = delete;
  ThreadConfig& operator=(const ThreadConfig&) = delete;

 private:
  int pool_, blas_;
};

// CPU time of the whole process (every thread: frontend, worker, pool, OpenBLAS), seconds.
// Per step next to the wall time it shows whether threads burn cores waiting: a spinning
// helper adds CPU time without shortening the step.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void cpu_counter(benchmark::State& state, double cpu_s) {
  state.counters["cpu_ms_per_step"] = benchmark::Counter(1e3 * cpu_s / double(state.iterations()));
}

void thread_counters(benchmark::State& state) {
  state.counters["pool_threads"] = tide::num_threads();
  state.counters["blas_threads"] = tide::blas_num_threads();
}

// ---- one eager training step -------------------------------------------------------------

// zero_grad, forward, l2_loss, backward, SGD update, then wait_all() and loss.item(): the
// sync per step, after which the whole step has run.
// Args: {pool threads, OpenBLAS threads}, 0 = as tide set them up (the configuration the
// targets are judged on; the others show how the two thread sets interact).
void BM_TextbookMlpStep(benchmark::State& state) {
  ThreadConfig threads(int(state.range(0)), int(state.range(1)));
  tide::Generator gen{kSeed};
  auto net = textbook_mlp(gen);
  tide::train::SGD opt(net->parameters(), tide::train::SGDOptions(kLr));
  Tensor x = tide::randn({kBatch, kIn}, tide::DType::float32, gen);
  Tensor y = tide::ones({kBatch, kOut});
  tide::wait_all();
  float loss_value = 0;
  double cpu0 = process_cpu_s();
  for (auto _ : state) {
    opt.zero_grad();
    Tensor loss = tide::nn::l2_loss((*net)(x), y);
    loss.backward();
    opt.step();
    // wait_all, not only loss.item(): item() waits for the forward pass alone, so the
    // step's backward and update would spill into the next iteration's (or, for the last
    // one, out of the) timing. Then item() returns at once.
    tide::wait_all();
    loss_value = loss.item<float>();
  }
  cpu_counter(state, process_cpu_s() - cpu0);
  tide::wait_all();
  state.SetItemsProcessed(state.iterations());
  set_step_gflops(state);
  thread_counters(state);
  // A plain counter, not DoNotOptimize(float): see BM_MlpStep in bench_tide.cpp.
  state.counters["loss"] = loss_value;
}
BENCHMARK(BM_TextbookMlpStep)
    ->ArgNames({"pool", "blas"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Where a step's time goes (bench/step_profile.h): matmul ops against every other op and
// the worker's idle gaps. Manual time = the profiled steps' wall time.
void BM_TextbookMlpStepProfile(benchmark::State& state) {
  tide::Generator gen{kSeed};
  auto net = textbook_mlp(gen);
  tide::train::SGD opt(net->parameters(), tide::train::SGDOptions(kLr));
  Tensor x = tide::randn({kBatch, kIn}, tide::DType::float32, gen);
  Tensor y = tide::ones({kBatch, kOut});
  tide::wait_all();
  StepProfile prof({"matmul"});
  for (auto _ : state) {
    prof.begin();
    opt.zero_grad();
    Tensor loss = tide::nn::l2_loss((*net)(x), y);
    loss.backward();
    opt.step();
    tide::wait_all();
    state.SetIterationTime(prof.end());
  }
  prof.report(state, "gemm");
}
BENCHMARK(BM_TextbookMlpStepProfile)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- the limit: the step's GEMMs alone -----------------------------------------------------

struct Gemm {
  const char* name;
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
};

// The 8 GEMMs of a step (table at the top), then dX, which only tide computes today.
constexpr Gemm kStepGemms[] = {
    {"fwd1 X W1", CblasNoTrans, CblasNoTrans, kBatch, kH1, kIn},
    {"fwd2 A1 W2", CblasNoTrans, CblasNoTrans, kBatch, kH2, kH1},
    {"fwd3 A2 W3", CblasNoTrans, CblasNoTrans, kBatch, kOut, kH2},
    {"dW3 A2^T dZ3", CblasTrans, CblasNoTrans, kH2, kOut, kBatch},
    {"dA2 dZ3 W3^T", CblasNoTrans, CblasTrans, kBatch, kH2, kOut},
    {"dW2 A1^T dZ2", CblasTrans, CblasNoTrans, kH1, kH2, kBatch},
    {"dA1 dZ2 W2^T", CblasNoTrans, CblasTrans, kBatch, kH1, kH2},
    {"dW1 X^T dZ1", CblasTrans, CblasNoTrans, kIn, kH1, kBatch},
};
constexpr Gemm kDxGemm = {"dX dZ1 W1^T", CblasNoTrans, CblasTrans, kBatch, kIn, kH1};

// Operands for one GEMM, filled with values of the step's scale (no denormals).
struct GemmBuffers {
  std::vector<float> a, b, c;
  explicit GemmBuffers(const Gemm& g)
      : a(size_t(g.m) * g.k), b(size_t(g.k) * g.n), c(size_t(g.m) * g.n) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 97) - 48) * 0.02f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 89) - 44) * 0.001f;
  }
  void run(const Gemm& g) {
    int lda = g.ta == CblasNoTrans ? g.k : g.m;  // A is m x k, stored k x m when transposed
    int ldb = g.tb == CblasNoTrans ? g.n : g.k;
    cblas_sgemm(CblasRowMajor, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                c.data(), g.n);
  }
};

// The GEMM-only floor of one step: the 8 GEMMs back to back on the calling thread, with
// OpenBLAS's thread count as tide leaves it. Arg 1 adds dX (what tide's step runs today).
void BM_TextbookGemmFloor(benchmark::State& state) {
  std::vector<Gemm> gemms(std::begin(kStepGemms), std::end(kStepGemms));
  if (state.range(0)) gemms.push_back(kDxGemm);
  std::vector<std::unique_ptr<GemmBuffers>> bufs;
  for (const Gemm& g : gemms) bufs.push_back(std::make_unique<GemmBuffers>(g));
  double cpu0 = process_cpu_s();
  for (auto _ : state) {
    for (size_t i = 0; i < gemms.size(); ++i) bufs[i]->run(gemms[i]);
    benchmark::ClobberMemory();
  }
  cpu_counter(state, process_cpu_s() - cpu0);
  state.SetItemsProcessed(state.iterations());
  set_step_gflops(state);  // the needed FLOPs, also for with_dX: its rate is the useful rate
  state.counters["gemms"] = double(gemms.size());
  state.counters["blas_threads"] = tide::blas_num_threads();
}
BENCHMARK(BM_TextbookGemmFloor)
    ->ArgName("with_dX")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Each GEMM alone, to see where the floor's time goes. Arg: index into kStepGemms (8 = dX).
void BM_TextbookGemm(benchmark::State& state) {
  const Gemm& g = state.range(0) < 8 ? kStepGemms[state.range(0)] : kDxGemm;
  GemmBuffers buf(g);
  for (auto _ : state) {
    buf.run(g);
    benchmark::ClobberMemory();
  }
  state.SetLabel(g.name);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * g.m * g.n * g.k / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TextbookGemm)->DenseRange(0, 8)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- does OpenBLAS's idle worker slow tide's elementwise ops? --------------------------------

// After a multi-threaded GEMM, OpenBLAS 0.3.21's (pthread build) worker does not sleep at
// once: it loops on sched_yield for ~50 ms of CPU (OPENBLAS_THREAD_TIMEOUT, read only from
// the environment at load). In the step, GEMMs come every few ms, so it is awake during
// every elementwise op. This times 8 tide adds of the step's largest size (1024 x 2048)
// right after the step's first GEMM on 2 OpenBLAS threads (arg gemm:1), and right after the
// same GEMM on 1 thread (the same cache pollution) with the worker asleep for 200 ms
// (gemm:0); the GEMM and the gap are not timed. pool = tide's intra-op threads.
void BM_ElementwiseAfterGemm(benchmark::State& state) {
  ThreadConfig threads(int(state.range(1)), 0);
  Tensor a = tide::randn({kBatch, kH1}), b = tide::randn({kBatch, kH1}), c;
  GemmBuffers gemm(kStepGemms[0]);
  tide::wait_all();
  for (auto _ : state) {
    state.PauseTiming();
    if (state.range(0)) {
      gemm.run(kStepGemms[0]);
    } else {  // the same GEMM (same cache pollution) on one thread, OpenBLAS's worker asleep
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      int blas = tide::blas_num_threads();
      tide::set_blas_num_threads(1);
      gemm.run(kStepGemms[0]);
      tide::set_blas_num_threads(blas);
    }
    state.ResumeTiming();
    for (int i = 0; i < 8; ++i) c = a + b;
    c.wait_to_read();
  }
  state.SetBytesProcessed(state.iterations() * 8 * kBatch * kH1 * 12);
  thread_counters(state);
}
BENCHMARK(BM_ElementwiseAfterGemm)
    ->ArgNames({"gemm", "pool"})
    ->Args({1, 0})
    ->Args({0, 0})
    ->Args({1, 1})
    ->Args({0, 1})
    ->Iterations(20)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- the trainer's sync policies ------------------------------------------------------------

// Trainer::run over kPolicyBatches minibatches of the textbook MLP on SyntheticSource data
// (a queued randn per minibatch), timed by the run's own wall clock including its final
// sync (TrainResult::total_s). items_per_second = minibatches per second. 20 minibatches:
// `none` queues all of them (~88 MB each) before the worker catches up.
constexpr int kPolicyBatches = 20;

void BM_TrainerPolicy(benchmark::State& state, const char* policy) {
  tide::Generator gen{kSeed};
  auto net = textbook_mlp(gen);
  tide::train::SGD opt(net->parameters(), tide::train::SGDOptions(kLr));
  tide::train::SyntheticSource source(
      tide::train::SyntheticOptions().examples(kBatch).features(kIn).batch_size(kBatch).seed(0));
  tide::train::Trainer trainer(*net, tide::nn::l2_loss, opt, source);
  tide::train::TrainerOptions options;
  options.batches = kPolicyBatches;
  options.policy = tide::train::Policy::parse(policy);
  double in_flight = 0, loss = 0;
  for (auto _ : state) {
    tide::train::TrainResult r = trainer.run(options);
    state.SetIterationTime(r.total_s);
    in_flight = std::max(in_flight, r.peak_steps_in_flight());
    loss = r.final_loss;
  }
  state.SetItemsProcessed(state.iterations() * kPolicyBatches);
  state.counters["peak_steps_in_flight"] = in_flight;
  state.counters["loss"] = loss;
}
BENCHMARK_CAPTURE(BM_TrainerPolicy, none, "none")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainerPolicy, bounded_2, "bounded:2")
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainerPolicy, bounded_4, "bounded:4")
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainerPolicy, per_batch, "per_batch")
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
