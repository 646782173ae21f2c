// The engine's components in isolation (core/engine/hazards.h, core/engine/backpressure.h,
// core/engine/reclaim.h), on streams and storages made by hand: which waits a task gets, how the
// per-storage state moves, when a bound refuses, what reclaim releases. The engine tests
// (test_hazards.cpp, test_backpressure.cpp) check the same rules end to end.
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "core/engine/backpressure.h"
#include "core/engine/engine_impl.h"
#include "core/engine/hazards.h"
#include "core/engine/reclaim.h"

namespace tide {
namespace {

// Streams with no worker and no device side: completion is set by hand.
struct Streams {
  std::deque<StreamImpl> s;
  explicit Streams(int n) {
    for (int i = 0; i < n; ++i) s.emplace_back(nullptr, 100 + i, Device::cpu());
  }
  StreamImpl* operator[](int i) { return &s[size_t(i)]; }
};

// Storages from slots (they own no memory; their hazard state is all these tests need).
struct Storages {
  std::vector<StorageRef> v;
  Storage* make(size_t bytes = 64) {
    v.push_back(StorageRef::adopt(Storage::make_slot(bytes, Device::cpu())));
    return v.back().get();
  }
};

std::vector<StreamPos> overflowed;
void record_overflow(void*, StreamPos p) { overflowed.push_back(p); }

Engine::Task task() {
  Engine::Task t;
  t.num_waits = 0;
  return t;
}

TEST(HazardRules, ReadAfterWriteOnAnotherStreamWaitsForTheWriter) {
  Streams st(2);
  Storages mem;
  Storage* s = mem.make();
  s->hazard.last_write = {st[0], 5};
  Engine::Task t = task();
  Storage* reads[] = {s};
  collect_hazards(t, reads, {}, st[1], record_overflow, nullptr);
  ASSERT_EQ(t.num_waits, 1);
  EXPECT_EQ(t.waits[0].stream, st[0]);
  EXPECT_EQ(t.waits[0].seq, 5u);
}

TEST(HazardRules, NoWaitOnTheSameStreamOrForCompleteWork) {
  Streams st(2);
  Storages mem;
  Storage* s = mem.make();
  s->hazard.last_write = {st[0], 5};
  Storage* reads[] = {s};
  Engine::Task t = task();
  collect_hazards(t, reads, {}, st[0], record_overflow, nullptr);  // FIFO orders it
  EXPECT_EQ(t.num_waits, 0);
  st[0]->completed.store(5);
  Engine::Task u = task();
  collect_hazards(u, reads, {}, st[1], record_overflow, nullptr);  // already done
  EXPECT_EQ(u.num_waits, 0);
}

TEST(HazardRules, WriteWaitsForTheLastWriteAndEveryReadSince) {
  Streams st(4);
  Storages mem;
  Storage* s = mem.make();
  s->hazard.last_write = {st[0], 3};
  s->hazard.readers[0] = {st[1], 7};
  s->hazard.readers[1] = {st[2], 2};
  s->hazard.num_readers = 2;
  Storage* writes[] = {s};
  Engine::Task t = task();
  collect_hazards(t, {}, writes, st[3], record_overflow, nullptr);
  ASSERT_EQ(t.num_waits, 3);
  EXPECT_EQ(t.waits[0].stream, st[0]);
  EXPECT_EQ(t.waits[1].stream, st[1]);
  EXPECT_EQ(t.waits[1].seq, 7u);
  EXPECT_EQ(t.waits[2].stream, st[2]);
}

TEST(HazardRules, OneWaitPerStreamForTheLaterPosition) {
  Streams st(2);
  Storages mem;
  Storage* a = mem.make();
  Storage* b = mem.make();
  a->hazard.last_write = {st[0], 4};
  b->hazard.last_write = {st[0], 9};
  Storage* reads[] = {a, b};
  Engine::Task t = task();
  collect_hazards(t, reads, {}, st[1], record_overflow, nullptr);
  ASSERT_EQ(t.num_waits, 1);
  EXPECT_EQ(t.waits[0].seq, 9u);
}

TEST(HazardRules, PositionsBeyondTheWaitSlotsGoToTheOverflow) {
  Streams st(Engine::Task::kMaxWaits + 2);
  Storages mem;
  std::vector<Storage*> reads;
  for (int i = 0; i <= Engine::Task::kMaxWaits; ++i) {
    Storage* s = mem.make();
    s->hazard.last_write = {st[i], 1};
    reads.push_back(s);
  }
  overflowed.clear();
  Engine::Task t = task();
  collect_hazards(t, reads, {}, st[Engine::Task::kMaxWaits + 1], record_overflow, nullptr);
  EXPECT_EQ(t.num_waits, Engine::Task::kMaxWaits);
  ASSERT_EQ(overflowed.size(), 1u);
  EXPECT_EQ(overflowed[0].stream, st[Engine::Task::kMaxWaits]);
}

TEST(HazardRules, RecordAccessMakesTheLastWriterAndTheReaders) {
  Streams st(2);
  Storages mem;
  Storage* r = mem.make();
  Storage* w = mem.make();
  w->hazard.readers[0] = {st[1], 1};
  w->hazard.num_readers = 1;
  Storage* reads[] = {r};
  Storage* writes[] = {w};
  Engine::Task t = task();
  record_access(t, reads, writes, {st[0], 12}, record_overflow, nullptr);
  EXPECT_EQ(w->hazard.last_write.stream, st[0]);
  EXPECT_EQ(w->hazard.last_write.seq, 12u);
  EXPECT_EQ(w->hazard.num_readers, 0) << "a write clears the readers";
  ASSERT_EQ(r->hazard.num_readers, 1);
  EXPECT_EQ(r->hazard.readers[0].seq, 12u);
  record_access(t, reads, {}, {st[0], 13}, record_overflow, nullptr);
  EXPECT_EQ(r->hazard.num_readers, 1) << "one entry per stream";
  EXPECT_EQ(r->hazard.readers[0].seq, 13u);
}

TEST(HazardRules, AFifthReadingStreamTakesOverTheOldestReader) {
  const int k = HazardState::kInlineReaders;
  Streams st(k + 1);
  Storages mem;
  Storage* s = mem.make();
  Storage* reads[] = {s};
  for (int i = 0; i < k; ++i) {
    Engine::Task t = task();
    record_access(t, reads, {}, {st[i], 1}, record_overflow, nullptr);
  }
  ASSERT_EQ(s->hazard.num_readers, k);
  Engine::Task t = task();
  record_access(t, reads, {}, {st[k], 1}, record_overflow, nullptr);
  ASSERT_EQ(t.num_waits, 1) << "it waits for the oldest reader, whose entry it takes";
  EXPECT_EQ(t.waits[0].stream, st[0]);
  EXPECT_EQ(s->hazard.num_readers, k);
  st[1]->completed.store(1);  // a finished reader is dropped before anyone waits
  Engine::Task u = task();
  Streams more(1);
  record_access(u, reads, {}, {more[0], 1}, record_overflow, nullptr);
  EXPECT_EQ(u.num_waits, 0);
}

TEST(BackpressureRules, AddedBytesCountEachNewStorageOnce) {
  Storages mem;
  Storage* a = mem.make(100);
  Storage* b = mem.make(1000);
  Storage* held = mem.make(5000);
  held->hazard.queued_refs = 1;  // queued work holds it already
  Storage* reads[] = {a, a, held};
  Storage* writes[] = {a, b, b};
  EXPECT_EQ(added_bytes(reads, writes), 1100u);
}

TEST(BackpressureRules, BoundsRefuseOnlyWithWorkInFlight) {
  BackpressureBounds none;
  EXPECT_FALSE(none.any());
  EXPECT_FALSE(over_bounds(none, 1000, size_t(1) << 40, 1));
  BackpressureBounds ops{4, 0};
  EXPECT_FALSE(over_bounds(ops, 3, 0, 0));
  EXPECT_TRUE(over_bounds(ops, 4, 0, 0));
  BackpressureBounds bytes{0, 1000};
  EXPECT_FALSE(over_bounds(bytes, 2, 600, 400));
  EXPECT_TRUE(over_bounds(bytes, 2, 600, 401));
  EXPECT_FALSE(over_bounds(bytes, 0, 0, 5000)) << "a task bigger than the bound runs alone";
}

TEST(ReclaimRules, ReleasesTheStoragesOfCompleteTasksOnly) {
  std::deque<StreamImpl> streams;
  streams.emplace_back(nullptr, 0, Device::cpu());
  StreamImpl& s = streams.front();
  s.tail_seg = s.reclaim_seg = s.head_seg = new Segment;
  Storages mem;
  Storage* a = mem.make(100);
  Storage* b = mem.make(300);
  Reclaimer rc;
  int destroyed = 0;
  static int* counter = nullptr;
  counter = &destroyed;
  // Two queued tasks: the first holds a and b, the second b.
  for (int i = 0; i < 2; ++i) {
    Engine::Task& t = s.tail_seg->slots[i];
    t.num_reads = 0;
    t.num_writes = i == 0 ? 2 : 1;
    t.storages[0] = i == 0 ? a : b;
    if (i == 0) t.storages[1] = b;
    for (int j = 0; j < t.num_writes; ++j) rc.hold(t.storages[j]);
    t.destroy = [](Engine::Task&) { ++*counter; };
  }
  s.submitted = 2;
  EXPECT_EQ(rc.inflight_bytes(), 400u) << "each storage counted once";
  EXPECT_EQ(a->use_count(), 2);
  EXPECT_EQ(b->use_count(), 2) << "the queue holds one reference however many tasks name b";
  std::vector<Segment*> free_segments;
  EXPECT_EQ(rc.reclaim(streams, free_segments), 0u) << "nothing is complete";
  s.completed.store(1);
  EXPECT_EQ(rc.reclaim(streams, free_segments), 1u);
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(a->use_count(), 1);
  EXPECT_EQ(rc.inflight_bytes(), 300u) << "b is still held by the second task";
  s.completed.store(2);
  EXPECT_EQ(rc.reclaim(streams, free_segments), 1u);
  EXPECT_EQ(rc.inflight_bytes(), 0u);
  EXPECT_EQ(b->use_count(), 1);
  delete s.tail_seg;
}

TEST(ReclaimRules, BatchesAreDueByCountOrBytes) {
  Reclaimer rc;
  for (int i = 1; i < Reclaimer::kReclaimEvery; ++i) EXPECT_FALSE(rc.note_submit());
  EXPECT_TRUE(rc.note_submit());
}

// The cache-line layout the enqueue path depends on: on a 2-core VM a line that
// the frontend writes on every submit while a worker reads it costs a transfer per op
// (bench/RESULTS.md, "The enqueue path's cache lines"). Offsets only: a reordering that
// puts them back on one line fails here, not in a benchmark.
namespace layout {
constexpr size_t line(size_t offset) { return offset / 64; }
}  // namespace layout

TEST(EngineLayout, FrontendWritesAndWorkerReadsAreOnSeparateCacheLines) {
  using layout::line;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
  // The stream: the worker reads eng/dev/polled per task; frontends write submitted and
  // the reclaim cursor per submit; the worker writes issued and completed.
  const size_t worker_reads = line(offsetof(StreamImpl, polled));
  EXPECT_EQ(line(offsetof(StreamImpl, dev)), worker_reads);
  for (size_t frontend : {offsetof(StreamImpl, submitted), offsetof(StreamImpl, tail_seg),
                          offsetof(StreamImpl, reclaimed), offsetof(StreamImpl, reclaim_seg)}) {
    EXPECT_NE(line(frontend), worker_reads);
    EXPECT_NE(line(frontend), line(offsetof(StreamImpl, published)));
    EXPECT_NE(line(frontend), line(offsetof(StreamImpl, issued)));
    EXPECT_NE(line(frontend), line(offsetof(StreamImpl, completed)));
  }
  // The frontend reads `sleeping` right after it writes `published`.
  EXPECT_NE(line(offsetof(StreamImpl, sleeping)), line(offsetof(StreamImpl, published)));
  EXPECT_EQ(alignof(StreamImpl) % 64, 0u);
  // The engine: workers read `waiters` on every retire; frontends write the lock and the
  // reclaimer's counters on every submit.
  const size_t waiters = line(offsetof(Engine::State, waiters));
  EXPECT_NE(line(offsetof(Engine::State, mu)), waiters);
  EXPECT_NE(line(offsetof(Engine::State, reclaimer)), waiters);
  EXPECT_NE(line(offsetof(Engine::State, reclaimer) + sizeof(Reclaimer) - 1), waiters);
  EXPECT_NE(line(offsetof(Engine::State, synchronous)), waiters);
  EXPECT_EQ(alignof(Engine::State) % 64, 0u);
  // Task slots: one slot's lines are never another's (the frontend fills slot k+1 while the
  // worker reads slot k), and a task without waits touches three: the header, the
  // storages and a payload that starts a line.
  EXPECT_EQ(alignof(Engine::Task), 64u);
  EXPECT_EQ(sizeof(Engine::Task) % 64, 0u);
  for (size_t header : {offsetof(Engine::Task, invoke), offsetof(Engine::Task, op),
                        offsetof(Engine::Task, seq), offsetof(Engine::Task, stream),
                        offsetof(Engine::Task, num_reads), offsetof(Engine::Task, replaces)})
    EXPECT_EQ(line(header), 0u);
  EXPECT_EQ(line(offsetof(Engine::Task, storages)), 1u);
  EXPECT_EQ(line(offsetof(Engine::Task, storages) + sizeof(Engine::Task::storages) - 1), 1u);
  EXPECT_EQ(offsetof(Engine::Task, payload) % 64, 0u);
#pragma GCC diagnostic pop
}

}  // namespace
}  // namespace tide
