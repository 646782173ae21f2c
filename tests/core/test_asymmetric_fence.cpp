// core/engine/asymmetric_fence.h: the store-buffering litmus test. Thread A stores x then loads y
// behind light_fence(); thread B stores y then loads x behind heavy_fence(). If both loads
// read 0, a store sat in a store buffer past the other thread's load: the lost wake-up the
// engine's publish / sleep pair must never have.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/engine/asymmetric_fence.h"

namespace tide {
namespace {

enum class HeavySide { heavy_fence, ordinary_fence };

// Runs n rounds; returns how many ended with both loads reading 0.
int store_buffering_outcomes(int n, HeavySide heavy) {
  std::atomic<int> x{0}, y{0}, arrivals{0};
  std::vector<int> r1(n), r2(n);
  // The k-th meeting of the two threads (k >= 1). Each then waits a few pauses, different
  // per round and per thread, so that the stores meet the loads at many offsets.
  auto meet = [&](int k) {
    arrivals.fetch_add(1, std::memory_order_acq_rel);
    while (arrivals.load(std::memory_order_acquire) < 2 * k) __builtin_ia32_pause();
  };
  auto pause = [](int n) {
    for (int k = 0; k < n; ++k) __builtin_ia32_pause();
  };
  std::thread b([&] {
    for (int i = 0; i < n; ++i) {
      meet(2 * i + 1);
      pause((i >> 1) % 8);
      y.store(1, std::memory_order_relaxed);
      if (heavy == HeavySide::heavy_fence) detail::heavy_fence();
      else std::atomic_thread_fence(std::memory_order_seq_cst);
      r2[i] = x.load(std::memory_order_relaxed);
      meet(2 * i + 2);
    }
  });
  for (int i = 0; i < n; ++i) {
    meet(2 * i + 1);
    pause(i % 8);
    x.store(1, std::memory_order_relaxed);
    detail::light_fence();
    r1[i] = y.load(std::memory_order_relaxed);
    meet(2 * i + 2);
    x.store(0, std::memory_order_relaxed);  // B reads them again only after the next meeting
    y.store(0, std::memory_order_relaxed);
  }
  b.join();
  int both_zero = 0;
  for (int i = 0; i < n; ++i) both_zero += r1[i] == 0 && r2[i] == 0;
  return both_zero;
}

TEST(AsymmetricFence, LightAndHeavyFencesForbidStoreBuffering) {
  const bool membarrier = detail::enable_asymmetric_fence();
  ::testing::Test::RecordProperty("membarrier", membarrier ? "yes" : "no");
  EXPECT_EQ(store_buffering_outcomes(20000, HeavySide::heavy_fence), 0)
      << "a store was reordered past the other thread's load (membarrier "
      << (membarrier ? "in use" : "unavailable: both fences are full fences") << ")";
}

// The same rounds with an ordinary fence on B's side: A's light fence is then only a
// compiler barrier, and x86 lets A's load pass its store, so the test above can see the
// reordering it forbids. Disabled: whether a machine shows it within 20 000 rounds is up to
// its timing. On the 2-vCPU AMD EPYC VM it did in 77 and in 127 rounds. Run with
// --gtest_also_run_disabled_tests --gtest_filter='AsymmetricFence.*'.
TEST(AsymmetricFence, DISABLED_WithoutTheHeavyFenceTheReorderingIsVisible) {
  if (!detail::enable_asymmetric_fence())
    GTEST_SKIP() << "no membarrier: light_fence() is a full fence, nothing to show";
  const int seen = store_buffering_outcomes(20000, HeavySide::ordinary_fence);
  std::printf("  store buffering seen in %d of 20000 rounds without the heavy fence\n", seen);
  EXPECT_GT(seen, 0) << "the litmus test saw no reordering on this machine in this run";
}

}  // namespace
}  // namespace tide
