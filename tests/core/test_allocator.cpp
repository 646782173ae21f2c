// The caching allocator (docs/architecture.md, Tensors and memory) and the memory probes: size
// classes, cache reuse in a steady loop, peak reset, empty_cache, consistent stats, storages held
// by queued work counted as in flight and released after execution, and the process RSS; the
// segments small GPU blocks come from (core/segment_source.h).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "core/segment_source.h"
#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class AllocatorTest : public EngineTest {
 protected:
  void TearDown() override {
    EngineTest::TearDown();
    Allocator::get().empty_cache();  // some tests make big blocks; do not keep them
  }
};

void expect_consistent(const AllocatorStats& s) {
  EXPECT_EQ(s.reserved_bytes, s.active_bytes + s.cached_bytes);
  EXPECT_LE(s.num_system_allocs, s.num_allocs);
  EXPECT_GE(s.peak_bytes, s.active_bytes);
}

TEST_F(AllocatorTest, SizeClassesRoundUpByLessThanAQuarter) {
  EXPECT_EQ(Allocator::round_size(0), 64u);
  EXPECT_EQ(Allocator::round_size(1), 64u);
  EXPECT_EQ(Allocator::round_size(64), 64u);
  EXPECT_EQ(Allocator::round_size(65), 80u);
  EXPECT_EQ(Allocator::round_size(80), 80u);
  EXPECT_EQ(Allocator::round_size(81), 96u);
  EXPECT_EQ(Allocator::round_size(128), 128u);
  EXPECT_EQ(Allocator::round_size(129), 160u);
  EXPECT_EQ(Allocator::round_size(1000), 1024u);
  EXPECT_EQ(Allocator::round_size(size_t(1) << 20), size_t(1) << 20);
  EXPECT_EQ(Allocator::round_size((size_t(1) << 20) + 1), (size_t(1) << 20) + (size_t(1) << 18));
  size_t prev = 0;
  for (size_t b = 1; b < (size_t(1) << 34); b = b * 9 / 8 + 1) {
    size_t r = Allocator::round_size(b);
    ASSERT_GE(r, b);
    EXPECT_EQ(r % 16, 0u) << b;
    if (b > 64) EXPECT_LT(double(r - b), 0.25 * double(b)) << b;
    EXPECT_EQ(Allocator::round_size(r), r) << b;  // a class size is its own class
    EXPECT_GE(r, prev) << b;                      // monotone
    prev = r;
  }
}

TEST_F(AllocatorTest, AllocateGivesAlignedRoundedBlocksAndCountsThem) {
  Allocator& alloc = Allocator::get();
  Engine::get().synchronize();
  const AllocatorStats s0 = alloc.stats();
  {
    StorageRef s = alloc.allocate(1000);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->bytes(), 1024u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u);
    EXPECT_TRUE(s->device().is_cpu());
    EXPECT_EQ(s->use_count(), 1);
    EXPECT_EQ(s->failure(), nullptr);
    const AllocatorStats s1 = alloc.stats();
    EXPECT_EQ(s1.active_bytes, s0.active_bytes + 1024);
    EXPECT_EQ(s1.num_allocs, s0.num_allocs + 1);
    expect_consistent(s1);
  }
  const AllocatorStats s2 = alloc.stats();
  EXPECT_EQ(s2.active_bytes, s0.active_bytes);
  EXPECT_GE(s2.cached_bytes, 1024u);
  expect_consistent(s2);
  // cuda:12: no machine has it and no test installs a fake there (cuda:0 may be a real GPU).
  EXPECT_TRUE(contains(error_of([] { Allocator::get(Device::cuda(12)); }), "[alloc]"));
}

TEST_F(AllocatorTest, SteadyLoopMakesNoSystemAllocations) {
  Generator gen(7);
  Tensor w = randn({16, 16}, DType::float32, gen);
  auto step = [&] {
    Tensor x = randn({8, 16}, DType::float32, gen);
    Tensor h = relu(matmul(x, w));
    Tensor s = sum(mul(h, h));
    float v = s.item();
    Engine::get().synchronize();  // executed work releases its storages here
    return v;
  };
  for (int i = 0; i < 3; ++i) step();  // warm the cache
  const AllocatorStats s0 = Allocator::get().stats();
  for (int i = 0; i < 50; ++i) EXPECT_GE(step(), 0.0f);
  const AllocatorStats s1 = Allocator::get().stats();
  EXPECT_EQ(s1.num_system_allocs, s0.num_system_allocs);
  EXPECT_GT(s1.num_allocs, s0.num_allocs + 50 * 4);  // they were served from the cache
  EXPECT_EQ(s1.active_bytes, s0.active_bytes);
  expect_consistent(s1);
}

TEST_F(AllocatorTest, PeakIsResettable) {
  Allocator& alloc = Allocator::get();
  Engine::get().synchronize();
  alloc.reset_peak();
  const AllocatorStats s0 = alloc.stats();
  EXPECT_EQ(s0.peak_bytes, s0.active_bytes);
  const size_t block = Allocator::round_size(size_t(4) << 20);
  {
    Tensor big = zeros({1 << 20});
    EXPECT_GE(alloc.stats().peak_bytes, s0.active_bytes + block);
  }
  Engine::get().synchronize();
  const AllocatorStats s1 = alloc.stats();
  EXPECT_EQ(s1.active_bytes, s0.active_bytes);
  EXPECT_GE(s1.peak_bytes, s0.active_bytes + block);  // the peak stays
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_bytes, s1.active_bytes);
}

TEST_F(AllocatorTest, EmptyCacheReturnsCachedBlocksOnly) {
  Allocator& alloc = Allocator::get();
  Tensor keep = full({1000}, 5.0);
  { Tensor t = zeros({300000}); }
  Engine::get().synchronize();
  const AllocatorStats s0 = alloc.stats();
  EXPECT_GE(s0.cached_bytes, Allocator::round_size(1200000));
  alloc.empty_cache();
  const AllocatorStats s1 = alloc.stats();
  EXPECT_EQ(s1.cached_bytes, 0u);
  EXPECT_EQ(s1.reserved_bytes, s1.active_bytes);
  EXPECT_EQ(s1.active_bytes, s0.active_bytes);
  EXPECT_EQ(keep.to_vector()[999], 5.0f);  // live blocks are untouched
  // The next allocation of that size needs the system again.
  const uint64_t sys = s1.num_system_allocs;
  Tensor again = zeros({300000});
  EXPECT_EQ(alloc.stats().num_system_allocs, sys + 1);
  expect_consistent(alloc.stats());
}

TEST_F(AllocatorTest, QueuedWorkHoldsItsStoragesUntilItRan) {
  Allocator& alloc = Allocator::get();
  Engine& eng = Engine::get();
  constexpr int64_t n = 100000;
  const size_t block = Allocator::round_size(size_t(n) * 4);
  Tensor tag = zeros({1});
  eng.synchronize();
  const EngineStats e0 = eng.stats();
  const AllocatorStats a0 = alloc.stats();
  EXPECT_EQ(e0.inflight_bytes, 0u);
  Gate gate;
  gate.hold(tag);
  {
    Tensor tmp = ones({n});
    Tensor tmp2 = mul(tmp, 3.0);
  }  // handles dropped: only the queued tasks hold the two blocks
  const EngineStats e1 = eng.stats();
  const AllocatorStats a1 = alloc.stats();
  EXPECT_EQ(e1.inflight_bytes, Allocator::round_size(4) + 2 * block);
  EXPECT_EQ(a1.active_bytes, a0.active_bytes + 2 * block);  // also active
  expect_consistent(a1);
  gate.open();
  eng.synchronize();
  const EngineStats e2 = eng.stats();
  const AllocatorStats a2 = alloc.stats();
  EXPECT_EQ(e2.inflight_bytes, 0u);
  EXPECT_EQ(a2.active_bytes, a0.active_bytes);
  EXPECT_GE(a2.cached_bytes, 2 * block);
  expect_consistent(a2);
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(AllocatorTest, ReclaimReleasesExecutedWorkWithoutWaiting) {
  // Executed tasks keep their storages until a frontend call reclaims them (in batches);
  // reclaim() does it at once.
  Engine& eng = Engine::get();
  Allocator& alloc = Allocator::get();
  eng.synchronize();
  const size_t active0 = alloc.stats().active_bytes;
  Stream s = Stream::default_stream();
  { Tensor t = ones({5000}); }
  // Wait (bounded) for the fill to run, with no call that would reclaim it.
  ASSERT_TRUE(wait_until([&] { return s.executed() == s.queued(); }));
  EXPECT_EQ(alloc.stats().active_bytes, active0 + Allocator::round_size(20000));
  eng.reclaim();
  EXPECT_EQ(alloc.stats().active_bytes, active0);
  EXPECT_EQ(eng.stats().inflight_bytes, 0u);
}

// ---- memory probes -------------------------------------------------------------------

TEST_F(AllocatorTest, ProcessRssIsReadAndGrowsWithTouchedMemory) {
  Allocator::get().empty_cache();
  const size_t rss0 = process_rss_bytes();
  EXPECT_GT(rss0, 0u);
  constexpr int64_t n = int64_t(16) << 20;  // 64 MiB of float32, touched by the fill
  Tensor big = full({n}, 1.0);
  big.wait_to_read();
  const size_t rss1 = process_rss_bytes();
  EXPECT_GE(rss1, rss0 + (size_t(32) << 20)) << "rss before " << rss0 << ", after " << rss1;
}

TEST_F(AllocatorTest, MemorySnapshotCombinesTheProbes) {
  Tensor x = ones({1000});
  Engine::get().synchronize();
  MemorySnapshot m = memory_snapshot();
  EXPECT_GT(m.rss_bytes, 0u);
  EXPECT_EQ(m.allocator.active_bytes, Allocator::get().stats().active_bytes);
  EXPECT_EQ(m.engine.queue_depth, 0u);
  EXPECT_EQ(m.engine.queued, Engine::get().stats().queued);
}

TEST_F(AllocatorTest, MemorySnapshotDoesNotWaitWhileAnAllocationIsStalled) {
  // memory_probe.h: "Cheap; does not wait." A monitor thread sampling it must not block
  // while another thread's allocation waits for queued work under a memory limit.
  Allocator& alloc = Allocator::get();
  constexpr int64_t n = 1 << 18;
  const size_t block = Allocator::round_size(size_t(n) * 4);
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  Gate gate;
  gate.hold(tag);
  { Tensor tmp = ones({n}); }
  const AllocatorStats before = alloc.stats();
  alloc.set_limit(before.active_bytes + block / 2);
  Tensor big;
  std::thread allocating([&] { big = ones({n}); });  // stalls until the gate opens
  bool stalled = wait_until([&] { return alloc.stats().pressure_stalls > before.pressure_stalls; });
  bool returned = false;
  if (stalled) {
    auto probe = std::async(std::launch::async, [] { return memory_snapshot(); });
    returned = probe.wait_for(3s) == std::future_status::ready;
    gate.open();
    probe.wait();
  }
  gate.open();
  allocating.join();
  EXPECT_TRUE(stalled);
  EXPECT_TRUE(returned) << "memory_snapshot() blocked while an allocation waited on the "
                           "memory limit (Engine::stats() takes the engine lock, which the "
                           "stalled allocation holds)";
  EXPECT_EQ(big.to_vector()[0], 1.0f);
  EXPECT_FALSE(gate.timed_out());
}

// What a CountingSource did; kept by the test, so it outlives the source.
struct Ledger {
  size_t max_request = SIZE_MAX;  // larger requests are refused (a nearly full device)
  int allocs = 0, releases = 0;
  std::set<void*> live;
};

// A block source over the C heap that records its calls in a Ledger.
struct CountingSource : BlockSource {
  explicit CountingSource(Ledger& l) : ledger(l) {}
  Ledger& ledger;
  void* allocate(size_t bytes) override {
    if (bytes > ledger.max_request) return nullptr;
    ++ledger.allocs;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    ledger.live.insert(p);
    return p;
  }
  void release(void* p, size_t) override {
    ++ledger.releases;
    EXPECT_EQ(ledger.live.erase(p), 1u) << "released twice, or not from this source";
    std::free(p);
  }
};

TEST(SegmentSource, SmallBlocksShareASegmentThatGoesBackWithItsLastBlock) {
  Ledger inner;
  {
    SegmentSource src(std::make_unique<CountingSource>(inner));
    std::vector<void*> blocks;
    for (int i = 0; i < 1000; ++i) blocks.push_back(src.allocate(64 + size_t(i % 3) * 100));
    EXPECT_EQ(inner.allocs, 1) << "1000 small blocks, one segment";
    EXPECT_EQ(src.segments(), 1u);
    std::set<uintptr_t> distinct;
    for (void* p : blocks) {
      auto a = reinterpret_cast<uintptr_t>(p);
      EXPECT_EQ(a % SegmentSource::kAlign, 0u);
      distinct.insert(a);
    }
    EXPECT_EQ(distinct.size(), blocks.size());
    for (size_t i = 0; i + 1 < blocks.size(); ++i) src.release(blocks[i], 64);
    EXPECT_EQ(inner.releases, 0) << "one block still lives in the segment";
    src.release(blocks.back(), 64);
    EXPECT_EQ(inner.releases, 1);
    EXPECT_EQ(src.segments(), 0u);
    // Large requests pass through, one for one.
    void* big = src.allocate(SegmentSource::kSmallMax + 1);
    EXPECT_EQ(inner.allocs, 2);
    src.release(big, SegmentSource::kSmallMax + 1);
    EXPECT_EQ(inner.releases, 2);
  }
  EXPECT_TRUE(inner.live.empty());
  {  // Segments still held when the source goes are returned.
    SegmentSource src(std::make_unique<CountingSource>(inner));
    (void)src.allocate(64);
    EXPECT_EQ(inner.live.size(), 1u);
  }
  EXPECT_TRUE(inner.live.empty());
}

TEST(SegmentSource, AFullSegmentIsFollowedByANewOneAndEachGoesBackOnItsOwn) {
  Ledger inner;
  SegmentSource src(std::make_unique<CountingSource>(inner));
  const size_t block = SegmentSource::kSmallMax;  // four per segment
  std::vector<void*> first, second;
  for (int i = 0; i < 4; ++i) first.push_back(src.allocate(block));
  for (int i = 0; i < 2; ++i) second.push_back(src.allocate(block));
  EXPECT_EQ(inner.allocs, 2);
  for (void* p : first) src.release(p, block);
  EXPECT_EQ(inner.releases, 1) << "the first segment is empty: returned";
  void* more = src.allocate(block);  // still from the second segment
  EXPECT_EQ(inner.allocs, 2);
  second.push_back(more);
  for (void* p : second) src.release(p, block);
  EXPECT_EQ(inner.releases, 2);
  EXPECT_TRUE(inner.live.empty());
}

TEST(SegmentSource, WithNoRoomForASegmentASmallBlockComesOnItsOwn) {
  Ledger inner;
  inner.max_request = SegmentSource::kSegment - 1;
  SegmentSource src(std::make_unique<CountingSource>(inner));
  void* p = src.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(src.segments(), 0u);
  src.release(p, 1000);
  EXPECT_EQ(inner.releases, 1);
  inner.max_request = 0;
  EXPECT_EQ(src.allocate(1000), nullptr) << "the inner source's refusal is passed on";
}

// The source's calls run outside the allocator's lock: a cudaFree synchronises the device
// and a cudaMalloc may take milliseconds, and a take from the cache (or a free) on another
// thread must not spin behind them. Here the source holds one allocation until released;
// meanwhile another thread takes a cached block and frees it.
TEST(AllocatorLock, TheSourceIsCalledOutsideTheLock) {
  struct GatedSource : BlockSource {
    std::promise<void> entered, go;
    std::shared_future<void> opened = go.get_future().share();
    std::atomic<int> calls{0};
    void* allocate(size_t bytes) override {
      if (calls.fetch_add(1) == 1) {  // the second allocation waits for the gate
        entered.set_value();
        opened.wait();
      }
      return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    }
    void release(void* p, size_t) override { std::free(p); }
  };
  auto owned = std::make_unique<GatedSource>();
  GatedSource& src = *owned;
  Allocator al(Device::cpu(), std::move(owned), "gated");
  { StorageRef warm = al.allocate(1000, "test"); }  // one cached block of 1000 bytes' class
  std::future<void> slow = std::async(std::launch::async, [&] {
    StorageRef big = al.allocate(1 << 20, "test");  // a new class: the source, gated
    EXPECT_NE(big->data(), nullptr);
  });
  src.entered.get_future().wait();
  std::future<void> cached = std::async(std::launch::async, [&] {
    StorageRef b = al.allocate(1000, "test");
    EXPECT_NE(b->data(), nullptr);
  });
  const bool took = cached.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(took) << "a take from the cache waited for the source's allocation";
  src.go.set_value();
  slow.get();
  cached.get();
  EXPECT_EQ(src.calls.load(), 2);
  EXPECT_EQ(al.stats().num_system_allocs, 2u);
  EXPECT_EQ(al.stats().active_bytes, 0u);
}

}  // namespace
}  // namespace tide

namespace tide {
namespace {

using namespace testing_support;

// A kernel's workspace over the limit fails its op with the op named once (not
// "[sum] [sum] out of memory ...", as it once was), the request, the limit and what is in use.
TEST_F(AllocatorTest, AWorkspaceOverTheLimitFailsItsOpNamedOnce) {
  Tensor x = ones({int64_t(2) << 20});  // 2M floats: the full sum needs a workspace
  x.wait_to_read();
  Allocator::get().set_limit(Allocator::get().stats().active_bytes + 1024);
  Tensor s = sum(x);
  std::string e = error_of([&] { s.wait_to_read(); });
  Allocator::get().set_limit(0);
  EXPECT_TRUE(contains(e, "[sum] out of memory"));
  EXPECT_FALSE(contains(e, "[sum] [sum]"));
  EXPECT_TRUE(contains(e, "workspace"));
  EXPECT_TRUE(contains(e, "limit"));
  clear_pending_failures();
}

// Over the limit, the cache is returned before the reservation passes it (a 512 MB
// limit with varying sizes once left 794 MB cached).
TEST_F(AllocatorTest, TheCacheIsReturnedBeforeTheReservationPassesTheLimit) {
  Allocator& al = Allocator::get();
  Engine::get().synchronize();
  const size_t base = al.stats().active_bytes;
  al.set_limit(base + (size_t(8) << 20));
  for (int64_t n : {1 << 20, 3 << 19, 1 << 19, 7 << 18, 5 << 18}) {  // varying block sizes
    Tensor t = zeros({n});
    t.wait_to_read();
  }
  Engine::get().synchronize();
  AllocatorStats st = al.stats();
  al.set_limit(0);
  // Without the rule the 4, 6, 2, 7 and 5 MB blocks would all stay cached (24 MB).
  EXPECT_LE(st.reserved_bytes, base + (size_t(8) << 20));
  EXPECT_GE(st.cache_flushes, 1u);
}

}  // namespace
}  // namespace tide
