// The memory recorder (core/memory_record.h): what it attributes to each block (op, the
// caller's file:line, stream, role), whether queued work holds a block, the timeline's
// events agreeing with the live blocks, deferred storages (allocation at execution), tags,
// nothing recorded while off, and recording while several threads allocate (TSan runs this
// suite).
#include <array>
#include <string>
#include <thread>

#include "core/memory_record.h"
#include "ops/ops.h"
#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;
using memory::Role;

class MemoryRecord : public EngineTest {
 protected:
  void TearDown() override {
    memory::stop();
    EngineTest::TearDown();
  }
  // The recorded live block of t's storage (whose block it is: a deferred storage's own).
  static const memory::Block* block_of(const memory::Snapshot& s, const Tensor& t) {
    const Storage* st = t.storage();
    if (st->is_deferred()) st = st->backing();
    for (const memory::Block& b : s.blocks)
      if (b.bytes == st->bytes() && b.requested == st->requested_bytes() &&
          std::any_of(s.events.begin(), s.events.end(), [&](const memory::Event& e) {
            return e.block == b.id && e.kind == memory::EventKind::take;
          }))
        return &b;
    return nullptr;
  }
  // Bytes by role of the snapshot's live blocks.
  static std::array<int64_t, memory::kNumRoles> live_by_role(const memory::Snapshot& s) {
    std::array<int64_t, memory::kNumRoles> by{};
    for (const memory::Block& b : s.blocks) by[size_t(b.role)] += int64_t(b.bytes);
    return by;
  }
  // Replays the events: bytes by role of what is live at the end.
  static std::array<int64_t, memory::kNumRoles> replay(const memory::Snapshot& s) {
    std::array<int64_t, memory::kNumRoles> by{};
    std::unordered_map<uint64_t, std::pair<Role, uint64_t>> live;
    for (const memory::Event& e : s.events) {
      switch (e.kind) {
        case memory::EventKind::take:
          live[e.block] = {e.role, e.bytes};
          by[size_t(e.role)] += int64_t(e.bytes);
          break;
        case memory::EventKind::free:
          by[size_t(live[e.block].first)] -= int64_t(live[e.block].second);
          live.erase(e.block);
          break;
        case memory::EventKind::retag:
          EXPECT_EQ(live[e.block].first, e.from);
          by[size_t(e.from)] -= int64_t(live[e.block].second);
          by[size_t(e.role)] += int64_t(live[e.block].second);
          live[e.block].first = e.role;
          break;
        default: break;
      }
    }
    return by;
  }
};

TEST_F(MemoryRecord, NamesTheOpTheCallersLineAndTheStream) {
  memory::start();
  // clang-format off
  Tensor a = randn({64, 32}); const uint32_t line = __LINE__;
  // clang-format on
  Tensor b = a + 1.0f;
  wait_all();
  memory::Snapshot s = memory::snapshot();
  const memory::Block* ba = nullptr;
  for (const memory::Block& b : s.blocks)
    if (b.site >= 0 && s.sites[size_t(b.site)].op == "randn") ba = &b;
  ASSERT_NE(ba, nullptr) << "no block named randn among " << s.blocks.size();
  const memory::Site& site = s.sites[size_t(ba->site)];
  EXPECT_NE(site.file.find("test_memory_record.cpp"), std::string::npos) << site.file;
  EXPECT_EQ(site.line, line);
  EXPECT_GE(site.stream, 0);
  EXPECT_EQ(ba->role, Role::temporary);
  EXPECT_EQ(ba->requested, size_t(64 * 32 * 4));
  EXPECT_EQ(ba->bytes, Allocator::round_size(64 * 32 * 4));
  EXPECT_FALSE(ba->queued);  // its op has run and been reclaimed
}

TEST_F(MemoryRecord, RecordsNothingWhileOffAndForgetsAnEarlierRecordingAtStart) {
  memory::start();
  Tensor a = randn({16});
  memory::stop();
  Tensor b = randn({1000});  // off: not recorded
  wait_all();
  memory::Snapshot s = memory::snapshot();
  for (const memory::Block& blk : s.blocks) EXPECT_NE(blk.requested, size_t(4000));
  EXPECT_FALSE(s.events.empty());
  memory::start();
  memory::Snapshot fresh = memory::snapshot();
  EXPECT_TRUE(fresh.events.empty());
  EXPECT_TRUE(fresh.blocks.empty());
  // What was taken before is untracked now.
  EXPECT_GE(fresh.untracked_bytes.at(0), Allocator::round_size(4000) + Allocator::round_size(64));
}

TEST_F(MemoryRecord, ABlockHeldByQueuedWorkIsQueuedUntilItsOpRuns) {
  Tensor x = zeros({256});
  wait_all();
  memory::start();
  Gate gate;
  gate.hold(x);
  Tensor y = x * 2.0f;  // queued behind the gate
  memory::Snapshot held = memory::snapshot();
  const memory::Block* by = block_of(held, y);
  ASSERT_NE(by, nullptr);
  EXPECT_TRUE(by->queued);
  EXPECT_EQ(held.sites.at(size_t(by->site)).op, "mul");
  // The queued bytes the events saw include y's block.
  EXPECT_GE(held.events.back().queued_bytes, by->bytes);
  gate.open();
  wait_all();
  Engine::get().reclaim();
  memory::Snapshot ran = memory::snapshot();
  const memory::Block* ry = block_of(ran, y);
  ASSERT_NE(ry, nullptr);
  EXPECT_FALSE(ry->queued);
}

TEST_F(MemoryRecord, TheEventsReplayToTheLiveBlocksByRole) {
  memory::start();
  std::vector<Tensor> keep;
  for (int i = 0; i < 20; ++i) {
    Tensor t = randn({int64_t(100 + 37 * i)});
    Tensor u = t * t + 1.0f;  // t * t is a temporary freed at once
    if (i % 3 == 0) keep.push_back(u);
  }
  Tensor p = randn({128});
  memory::tag(p, Role::parameter);
  memory::tag(p, Role::activation);  // activation replaces only temporary
  wait_all();
  Engine::get().reclaim();
  memory::Snapshot s = memory::snapshot();
  const std::array<int64_t, memory::kNumRoles> live = live_by_role(s);
  EXPECT_EQ(replay(s), live);
  EXPECT_EQ(live[size_t(Role::parameter)], int64_t(Allocator::round_size(128 * 4)));
  EXPECT_GE(live[size_t(Role::temporary)], int64_t(7 * Allocator::round_size(400)));
  // Frees happened (the temporaries), and each is after its take.
  size_t frees = 0;
  for (const memory::Event& e : s.events) frees += e.kind == memory::EventKind::free;
  EXPECT_GE(frees, 20u);
}

TEST_F(MemoryRecord, ATagRecordsABlockTakenBeforeTheRecordingStarted) {
  Tensor w = randn({333});
  wait_all();
  memory::start();
  memory::tag(w, Role::parameter);
  memory::Snapshot s = memory::snapshot();
  ASSERT_EQ(s.blocks.size(), 1u);
  EXPECT_EQ(s.blocks[0].role, Role::parameter);
  EXPECT_EQ(s.blocks[0].bytes, w.storage()->bytes());
  EXPECT_EQ(s.blocks[0].site, -1);
  ASSERT_EQ(s.events.size(), 1u);
  EXPECT_EQ(s.events[0].site, memory::kNoSite) << "no site is known for it";
  w = Tensor();
  Engine::get().reclaim();
  EXPECT_TRUE(memory::snapshot().blocks.empty());
}

TEST_F(MemoryRecord, RoleScopeAndWorkspaceRoles) {
  memory::start();
  Tensor a;
  {
    memory::RoleScope scope(Role::optimizer_state);
    a = zeros({50});
  }
  Tensor b = zeros({50});
  StorageRef ws = Allocator::get().workspace(4096, "test_ws");
  memory::Snapshot s = memory::snapshot();
  std::array<int, memory::kNumRoles> n{};
  for (const memory::Block& blk : s.blocks) ++n[size_t(blk.role)];
  EXPECT_EQ(n[size_t(Role::optimizer_state)], 1);
  EXPECT_EQ(n[size_t(Role::workspace)], 1);
  EXPECT_EQ(n[size_t(Role::temporary)], 1);
}

TEST_F(MemoryRecord, AnOutputAllocatedAtExecutionGetsItsSiteWhenItsBlockIsTaken) {
  Engine::get().set_allocation(Allocation::at_execution);  // EngineTest restores it
  memory::start();
  // clang-format off
  Tensor y = randn({500}); const uint32_t line = __LINE__;
  // clang-format on
  wait_all();
  memory::Snapshot s = memory::snapshot();
  const memory::Block* b = block_of(s, y);
  ASSERT_NE(b, nullptr);
  ASSERT_GE(b->site, 0);
  EXPECT_EQ(s.sites[size_t(b->site)].op, "randn");
  EXPECT_EQ(s.sites[size_t(b->site)].line, line);
}

TEST_F(MemoryRecord, MarksAndTheEventCap) {
  memory::RecordOptions o;
  o.max_events = 8;
  memory::start(o);
  memory::mark("step 1");
  for (int i = 0; i < 10; ++i) Tensor t = randn({10});
  wait_all();
  memory::Snapshot s = memory::snapshot();
  EXPECT_EQ(s.events.size(), 8u);
  EXPECT_GT(s.dropped_events, 0u);
  ASSERT_EQ(s.marks.size(), 1u);
  EXPECT_EQ(s.marks[0], "step 1");
  EXPECT_EQ(s.events[0].kind, memory::EventKind::mark);
}

TEST_F(MemoryRecord, ThreadsAllocateWhileAnotherTakesSnapshots) {
  memory::start();
  std::atomic<bool> done{false}, reading{false};
  std::vector<std::thread> workers;
  for (int k = 0; k < 3; ++k)
    workers.emplace_back([k, &reading] {
      while (!reading.load()) std::this_thread::yield();  // allocate while snapshots are taken
      for (int i = 0; i < 200; ++i) {
        Tensor t = randn({int64_t(16 + k + i % 7)});
        Tensor u = t + 1.0f;
        if (i % 50 == 0) wait_all();
      }
    });
  size_t snaps = 0;
  std::thread reader([&] {
    do {
      memory::Snapshot s = memory::snapshot();
      snaps += s.dropped_events == 0 ? 1 : 0;
      reading.store(true);
    } while (!done.load());
  });
  for (auto& w : workers) w.join();
  done.store(true);
  reader.join();
  wait_all();
  Engine::get().reclaim();
  memory::Snapshot s = memory::snapshot();
  const std::array<int64_t, memory::kNumRoles> live = live_by_role(s);
  EXPECT_EQ(replay(s), live);
  EXPECT_GE(snaps, 1u);
  EXPECT_GE(s.events.size(), 3u * 200u * 2u) << "every take and free of the threads' tensors";
}

}  // namespace
}  // namespace tide
