// The intra-op pool (core/thread_pool.h) and the BLAS's thread count (core/blas_threads.h):
// every index covered once at any thread count, exceptions reaching the caller, concurrent
// callers, helpers that stop using CPU once idle, and the BLAS's count being fixed at
// startup so that set_num_threads never changes a GEMM's bits.
#include <time.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/blas_threads.h"
#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class ThreadPool : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    saved_ = num_threads();
  }
  void TearDown() override {
    set_num_threads(saved_);
    EngineTest::TearDown();
  }
  int saved_ = 1;
};

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e3 * double(ts.tv_sec) + 1e-6 * double(ts.tv_nsec);
}

TEST_F(ThreadPool, EveryIndexOnceAtAnyThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(100003)}) {
      for (int64_t grain : {int64_t(1), int64_t(64), int64_t(4096)}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        });
        int64_t bad = 0;
        for (auto& h : hits) bad += h.load() != 1;
        EXPECT_EQ(bad, 0) << "threads " << threads << " n " << n << " grain " << grain;
      }
    }
  }
}

TEST_F(ThreadPool, AHelpersExceptionReachesTheCaller) {
  set_num_threads(2);
  auto throw_in_second_half = [] {
    parallel_for(int64_t(100000), int64_t(1000), [](int64_t b, int64_t) {
      if (b >= 50000) throw std::runtime_error("helper failed");
    });
  };
  EXPECT_THROW(throw_in_second_half(), std::runtime_error);
  // The pool is still usable afterwards.
  std::atomic<int64_t> sum{0};
  parallel_for(int64_t(100000), int64_t(1000), [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100000);
}

TEST_F(ThreadPool, ConcurrentCallersEachCoverTheirRange) {
  // A second caller runs inline while the pool is busy; both must still be complete.
  set_num_threads(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> bad{0};
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        std::vector<int> hits(20000, 0);
        parallel_for(int64_t(20000), int64_t(500), [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
        });
        for (int h : hits) bad += h != 1;
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(ThreadPool, IdleHelpersStopUsingCpu) {
  // After parallel regions (direct, and inside queued ops on the engine's worker), nothing
  // of tide's may keep spinning: over 200 ms of idling the whole process uses under 5 ms
  // of CPU. CPU time, not wall time: load from other processes can only lower it.
  // OpenBLAS 0.3.21's pthread worker loops on sched_yield for OPENBLAS_THREAD_TIMEOUT
  // (2^28 cycles, ~110 ms here) after the library loads and after each multi-threaded
  // GEMM (perf: do_sched_yield from libopenblas), which tide cannot change without the
  // environment (bench/RESULTS.md); so no GEMM here, and the window opens 300 ms in.
  set_num_threads(2);
  Tensor a = randn({1024, 512});
  Tensor c = relu(a + 1.0) * 2.0;
  std::vector<float> v(1 << 20, 1.0f);
  parallel_for(int64_t(v.size()), int64_t(4096), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) v[size_t(i)] *= 2.0f;
  });
  c.wait_to_read();
  // tide's spins end within ~0.1 ms; OpenBLAS's startup spin within ~110 ms of loading.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  double before = process_cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double used = process_cpu_ms() - before;
  EXPECT_LT(used, 5.0) << "ms of CPU used by an idle process over 200 ms";
}

TEST_F(ThreadPool, BlasThreadsAreSetOnceAndDoNotFollowThePool) {
  // The library found at run time is the one CMake chose (TIDE_BLAS, cmake/Blas.cmake).
  BlasThreadsInfo info = configure_blas_threads();
  const std::string want = info.configured == "blis" ? "BLIS" : "OpenBLAS";
  ASSERT_EQ(info.library, want) << "TIDE_BLAS=" << info.configured << "; " << info.config;
  EXPECT_GE(info.threads, 1);
  if (!info.from_env) EXPECT_LE(info.threads, usable_cores());
  EXPECT_NE(info.config.find(want), std::string::npos) << info.config;
  EXPECT_EQ(blas_num_threads(), info.threads);
  set_num_threads(1);
  EXPECT_EQ(configure_blas_threads().threads, info.threads);
  set_num_threads(3);
  EXPECT_EQ(configure_blas_threads().threads, info.threads);
}

TEST_F(ThreadPool, MatmulBitsDoNotDependOnThePoolSize) {
  // OpenBLAS's sgemm differs in the last bits between 1 and 2 of its threads; since its
  // count is fixed at startup, tide's pool size must not change a product; nor may the row
  // parts oneDNN's float and bfloat16 GEMMs run in (ops/cpu/one_openmp_thread.h). Shapes of
  // the textbook MLP's GEMMs, with both transposes.
  for (DType t : {DType::float32, DType::bfloat16}) {
    SCOPED_TRACE(name(t));
    Generator gen(7);
    Tensor x = cast(randn({256, 128}, DType::float32, gen), t);
    Tensor w = cast(randn({128, 512}, DType::float32, gen), t);
    Tensor g = cast(randn({256, 512}, DType::float32, gen), t);
    auto products = [&] {
      std::vector<float> out = cast(matmul(x, w), DType::float32).to_vector();
      std::vector<float> dw = cast(matmul(x, g, {true, false}), DType::float32).to_vector();
      std::vector<float> dx = cast(matmul(g, w, {false, true}), DType::float32).to_vector();
      out.insert(out.end(), dw.begin(), dw.end());
      out.insert(out.end(), dx.begin(), dx.end());
      return out;
    };
    set_num_threads(1);
    std::vector<float> one = products();
    set_num_threads(2);
    std::vector<float> two = products();
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace tide
