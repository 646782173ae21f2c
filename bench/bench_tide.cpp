// tide_bench: Google Benchmark suites for the engine's per-op costs, matmul and a
// bandwidth-bound elementwise op, each next to the anchor it is judged against, measured in
// the same run (docs/contributing.md, Benchmarks):
//   per-op costs   enqueue alone, throughput (enqueue + execute, one sync per batch), and a
//                  sync round trip per op -- never the enqueue alone called "the op's cost";
//   anchors        a thread hand-off (spinning atomics; mutex + condvar) for the round trip,
//                  cblas_sgemm for matmul, plain loops and memcpy for memory bandwidth, a
//                  plain Philox loop for randn.
// Every benchmark times wall-clock (UseRealTime): the work runs on tide's worker threads,
// so the calling thread's CPU time would say nothing. Run with repetitions for medians:
//   tide_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// The textbook MLP step, its GEMM floor and the trainer policies live in bench_mlp.cpp;
// the libtorch anchors in bench_torch.cpp (built only with -DTIDE_BENCH_LIBTORCH=ON).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/blas_threads.h"
#include "core/philox.h"
#include "tide.h"

namespace {

using tide::Tensor;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Threads for the multi-threaded anchors: as many as tide's intra-op pool uses by default
// (TIDE_NUM_THREADS or the number of cores), read without starting tide.
int anchor_threads() {
  if (const char* s = std::getenv("TIDE_NUM_THREADS"))
    if (int n = std::atoi(s); n > 0) return n;
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

// ---- per-op costs --------------------------------------------------------------------------

// Enqueue only: `y = x + 1` on a 1x2 tensor returns without waiting. The queue is drained
// every 4096 ops with the timer paused, so it never grows without bound; the worker keeps
// executing concurrently while the timer runs, as it would in a program.
void BM_EnqueueTinyAdd(benchmark::State& state) {
  Tensor x = tide::ones({1, 2});
  Tensor y;
  tide::wait_all();
  int64_t k = 0;
  for (auto _ : state) {
    y = x + 1;
    if (++k % 4096 == 0) {
      state.PauseTiming();
      tide::wait_all();
      state.ResumeTiming();
    }
  }
  tide::wait_all();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EnqueueTinyAdd)->UseRealTime();

// The same op run synchronously in the calling thread (SynchronousGuard): the frontend's
// work plus the kernel, with no hand-off to a worker. Against BM_EnqueueTinyAdd it shows
// what the hand-off itself costs.
void BM_SyncModeTinyAdd(benchmark::State& state) {
  Tensor x = tide::ones({1, 2});
  Tensor y;
  tide::wait_all();
  tide::SynchronousGuard sync;
  for (auto _ : state) y = x + 1;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SyncModeTinyAdd)->UseRealTime();

// Throughput: enqueue + execute, one wait_all() per batch of 1024 ops inside the timing;
// the time per iteration is the cost of one completed op.
void BM_TinyAddThroughput(benchmark::State& state) {
  constexpr int64_t kBatch = 1024;
  Tensor x = tide::ones({1, 2});
  Tensor y;
  tide::wait_all();
  int64_t k = 0;
  for (auto _ : state) {
    y = x + 1;
    if (++k % kBatch == 0) tide::wait_all();
  }
  tide::wait_all();  // the last partial batch, still timed
  state.SetItemsProcessed(state.iterations());
  state.counters["batch"] = double(kBatch);
}
BENCHMARK(BM_TinyAddThroughput)->UseRealTime();

// A sync round trip per op: the frontend waits for each result before queueing the next.
void BM_SyncEveryOp(benchmark::State& state) {
  Tensor x = tide::ones({1, 2});
  Tensor y;
  tide::wait_all();
  for (auto _ : state) {
    y = x + 1;
    y.wait_to_read();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SyncEveryOp)->UseRealTime();

// What an idle program costs: one op and a sync, then 1 s of sleep; the process's CPU time
// during the sleep (all threads: the worker's spin and yield after the op, the pool's).
// Reported as `cpu_ms`, the CPU milliseconds burnt in that idle second; a worker that kept
// spinning would show ~1000.
void BM_IdleSecondCpuTime(benchmark::State& state) {
  auto cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
  };
  Tensor x = tide::ones({1, 2});
  double burnt = 0;
  for (auto _ : state) {
    Tensor y = x + 1;
    y.wait_to_read();
    double c0 = cpu_ns();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    burnt += cpu_ns() - c0;
  }
  state.counters["cpu_ms"] = burnt / 1e6 / double(state.iterations());
}
BENCHMARK(BM_IdleSecondCpuTime)->UseRealTime()->Iterations(2)->Unit(benchmark::kMillisecond);

// ---- anchor: the thread hand-off a sync round trip cannot beat ------------------------------

// One PAUSE (cpu_relax), the unit an idle worker counts its polls in
// (StreamImpl::kPollPauses): its length differs by CPU from a few ns to ~40 ns.
void BM_PauseInstruction(benchmark::State& state) {
  for (auto _ : state) cpu_relax();
}
BENCHMARK(BM_PauseInstruction)->UseRealTime();

// Ping-pong between two threads spinning on atomics: the floor of a round trip through a
// worker that is awake and spinning (tide's worker spins ~50 µs before it sleeps).
void BM_ThreadHandoffAnchor_Spin(benchmark::State& state) {
  std::atomic<int64_t> ping{0}, pong{0};
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    int64_t seen = 0;
    for (;;) {
      int64_t p;
      while ((p = ping.load(std::memory_order_acquire)) == seen) {
        if (stop.load(std::memory_order_relaxed)) return;
        cpu_relax();
      }
      seen = p;
      pong.store(p, std::memory_order_release);
    }
  });
  int64_t i = 0;
  for (auto _ : state) {
    ping.store(++i, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != i) cpu_relax();
  }
  stop.store(true);
  partner.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ThreadHandoffAnchor_Spin)->UseRealTime();

// Ping-pong through a mutex and two condition variables: the round trip of a worker that
// sleeps between tasks (futex wake-ups both ways).
void BM_ThreadHandoffAnchor_CondVar(benchmark::State& state) {
  std::mutex mu;
  std::condition_variable to_partner, to_main;
  int64_t ping = 0, pong = 0;
  bool stop = false;
  std::thread partner([&] {
    std::unique_lock lock(mu);
    int64_t seen = 0;
    for (;;) {
      to_partner.wait(lock, [&] { return ping != seen || stop; });
      if (stop) return;
      seen = ping;
      pong = seen;
      to_main.notify_one();
    }
  });
  int64_t i = 0;
  for (auto _ : state) {
    std::unique_lock lock(mu);
    ping = ++i;
    to_partner.notify_one();
    to_main.wait(lock, [&] { return pong == i; });
  }
  {
    std::lock_guard lock(mu);
    stop = true;
  }
  to_partner.notify_one();
  partner.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ThreadHandoffAnchor_CondVar)->UseRealTime();

// ---- matmul vs cblas_sgemm ------------------------------------------------------------------

constexpr int kN = 1000;

void set_gflops(benchmark::State& state, int n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// tide::matmul of two 1000x1000 float32 tensors, waited for: enqueue, execute, sync.
void BM_Matmul1000(benchmark::State& state) {
  Tensor a = tide::randn({kN, kN}), b = tide::randn({kN, kN});
  Tensor y;
  tide::wait_all();
  for (auto _ : state) {
    y = tide::matmul(a, b);
    y.wait_to_read();
  }
  set_gflops(state, kN);
}
BENCHMARK(BM_Matmul1000)->UseRealTime()->Unit(benchmark::kMillisecond);

// tide::matmul of two n x n tensors of one dtype (Args: n, 0 float32 / 1 bfloat16 / 2
// float16), waited for: the CPU's 16-bit GEMMs (ops/cpu/half_gemm.h: oneDNN's bfloat16
// matmul, or float32 between a widening and a rounding) beside float32's, same run.
void BM_MatmulDtype(benchmark::State& state) {
  const int n = int(state.range(0));
  const tide::DType dtypes[] = {tide::DType::float32, tide::DType::bfloat16, tide::DType::float16};
  const tide::DType t = dtypes[state.range(1)];
  Tensor a = tide::cast(tide::randn({n, n}), t), b = tide::cast(tide::randn({n, n}), t);
  Tensor y;
  tide::wait_all();
  for (auto _ : state) {
    y = tide::matmul(a, b);
    y.wait_to_read();
  }
  set_gflops(state, n);
  state.SetLabel(std::string(tide::name(t)));
}
BENCHMARK(BM_MatmulDtype)
    ->ArgNames({"n", "dtype"})
    ->ArgsProduct({{128, 512, 2048}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The anchor: the same sgemm called directly on the benchmark thread.
void BM_CblasSgemm1000(benchmark::State& state) {
  std::vector<float> a(size_t(kN) * kN), b(size_t(kN) * kN), c(size_t(kN) * kN);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 97) * 0.01f - 0.5f;
    b[i] = float(i % 89) * 0.01f - 0.4f;
  }
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, a.data(), kN, b.data(),
                kN, 0.0f, c.data(), kN);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_gflops(state, kN);
}
BENCHMARK(BM_CblasSgemm1000)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- a bandwidth-bound op vs memory bandwidth ------------------------------------------------

constexpr int64_t kBig = int64_t(1) << 24;  // 16M floats, 64 MiB per tensor

// tide: c = a + b on two 16M-float tensors, waited for. 12 bytes per element (2 reads, 1 write).
void BM_Add16M(benchmark::State& state) {
  Tensor a = tide::randn({kBig}), b = tide::randn({kBig});
  Tensor c;
  tide::wait_all();
  for (auto _ : state) {
    c = a + b;
    c.wait_to_read();
  }
  state.SetBytesProcessed(state.iterations() * kBig * 12);
}
BENCHMARK(BM_Add16M)->UseRealTime()->Unit(benchmark::kMillisecond);

// Buffers shared by the anchor threads, first-touched before timing. Kept for the process's
// life: Google Benchmark may run a threaded benchmark's setup more than once.
struct AnchorBuffers {
  std::unique_ptr<float[]> a{new float[kBig]}, b{new float[kBig]}, c{new float[kBig]};
  AnchorBuffers() {
    for (int64_t i = 0; i < kBig; ++i) {
      a[i] = float(i & 1023);
      b[i] = 1.0f;
      c[i] = 0.0f;
    }
  }
};
AnchorBuffers& anchor_buffers() {
  static AnchorBuffers* b = new AnchorBuffers;
  return *b;
}

// This thread's slice of [0, kBig) when the anchor runs on state.threads() threads.
std::pair<int64_t, int64_t> slice(const benchmark::State& state) {
  int64_t t = state.threads(), i = state.thread_index();
  return {kBig * i / t, kBig * (i + 1) / t};
}

// The anchor: the plain loop c[i] = a[i] + b[i], on 1 thread and on as many as tide uses.
void BM_AddLoop16M(benchmark::State& state) {
  AnchorBuffers& buf = anchor_buffers();
  auto [lo, hi] = slice(state);
  const float* __restrict a = buf.a.get();
  const float* __restrict b = buf.b.get();
  float* __restrict c = buf.c.get();
  for (auto _ : state) {
    for (int64_t i = lo; i < hi; ++i) c[i] = a[i] + b[i];
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (hi - lo) * 12);
}
BENCHMARK(BM_AddLoop16M)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Threads(1);
      if (anchor_threads() > 1) b->Threads(anchor_threads());
    })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// memcpy of 64 MiB: 8 bytes per float moved (1 read, 1 write), for scale.
void BM_MemcpyBandwidth(benchmark::State& state) {
  AnchorBuffers& buf = anchor_buffers();
  auto [lo, hi] = slice(state);
  for (auto _ : state) {
    std::memcpy(buf.c.get() + lo, buf.a.get() + lo, size_t(hi - lo) * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (hi - lo) * 8);
}
BENCHMARK(BM_MemcpyBandwidth)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Threads(1);
      if (anchor_threads() > 1) b->Threads(anchor_threads());
    })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- random numbers vs raw Philox ------------------------------------------------------------

constexpr int64_t kRandn = 1000 * 1000;

// tide::randn of 1000x1000 floats, waited for, on 1 thread and on tide's default count.
// bench/randn_pairs.sh times PyTorch's torch.randn of the same size in alternating rounds.
void BM_RandnThroughput(benchmark::State& state) {
  const int saved = tide::num_threads();
  tide::set_num_threads(int(state.range(0)));
  tide::Generator gen(7);
  Tensor x;
  tide::wait_all();
  for (auto _ : state) {
    x = tide::randn({1000, 1000}, tide::DType::float32, gen);
    x.wait_to_read();
  }
  tide::set_num_threads(saved);
  state.SetItemsProcessed(state.iterations() * kRandn);
}
BENCHMARK(BM_RandnThroughput)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Arg(1);
      if (anchor_threads() > 1) b->Arg(anchor_threads());
    })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The anchor: the Philox blocks of 1M numbers in a plain loop on this thread, no transform.
void BM_PhiloxPlainLoop(benchmark::State& state) {
  std::vector<uint32_t> out(static_cast<size_t>(kRandn));
  uint64_t offset = 0;
  for (auto _ : state) {
    for (int64_t b = 0; b < kRandn / 4; ++b) {
      tide::philox::U32x4 v = tide::philox::block(offset + uint64_t(b), 7);
      std::memcpy(&out[size_t(4 * b)], v.v, sizeof v.v);
    }
    offset += kRandn / 4;
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kRandn);
}
BENCHMARK(BM_PhiloxPlainLoop)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- a small training step (the libtorch comparison's counterpart) --------------------------

// One SGD step of a 2-layer MLP (64x256 -> 256 ReLU -> 10, MSE loss) with autograd,
// ending with loss.item() -- a sync per step, as a training loop that reads the loss has.
// bench_torch.cpp's BM_TorchMlpStep runs the same step in libtorch.
void BM_MlpStep(benchmark::State& state) {
  constexpr int64_t kBatch = 64, kIn = 256, kHidden = 256, kOut = 10;
  tide::manual_seed(0);
  Tensor x = tide::randn({kBatch, kIn}), target = tide::randn({kBatch, kOut});
  Tensor w1 = tide::mul(tide::randn({kIn, kHidden}), 0.05), b1 = tide::zeros({kHidden});
  Tensor w2 = tide::mul(tide::randn({kHidden, kOut}), 0.05), b2 = tide::zeros({kOut});
  Tensor* params[] = {&w1, &b1, &w2, &b2};
  for (Tensor* p : params) p->requires_grad_();
  tide::wait_all();
  float loss_value = 0;
  for (auto _ : state) {
    Tensor h = tide::relu(tide::matmul(x, w1) + b1);
    Tensor d = tide::matmul(h, w2) + b2 - target;
    Tensor loss = tide::mean(d * d);
    loss.backward();
    {
      tide::autograd::NoGrad no_grad;
      for (Tensor* p : params) {
        p->sub_(p->grad(), 0.01);
        p->zero_grad();
      }
    }
    loss_value = loss.item<float>();  // the sync; also keeps the step from being optimised out
  }
  state.SetItemsProcessed(state.iterations());
  // Not DoNotOptimize(loss_value): with Google Benchmark 1.7.1 and -O3 that garbled the
  // float here (the counter then showed values like -1e34 while the loss was 0.9).
  state.counters["loss"] = loss_value;
}
BENCHMARK(BM_MlpStep)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::AddCustomContext("tide_threads", std::to_string(tide::num_threads()));
  benchmark::AddCustomContext("anchor_threads", std::to_string(anchor_threads()));
  const tide::BlasThreadsInfo blas = tide::configure_blas_threads();
  benchmark::AddCustomContext("tide_blas", blas.configured + " (" + blas.config + ")");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  tide::wait_all();
  return 0;
}
