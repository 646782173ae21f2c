// Engine basics, proven without timing: enqueue returns before execution, FIFO order within
// a stream, streams that really run concurrently, events and stream counters. Hazards
// across streams are in test_hazards.cpp, failures in test_errors.cpp.
#include <mutex>
#include <thread>
#include <vector>

#include "core/engine/engine_impl.h"
#include "core/engine/spin_wait.h"
#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class EngineBasics : public EngineTest {};

TEST_F(EngineBasics, SubmitReturnsBeforeTheOpRuns) {
  Tensor held = zeros({4});
  Gate gate;
  gate.hold(held);
  // Queued behind the closed gate: the call returned, so it cannot have run.
  Tensor a = ones({8});
  Tensor b = add(a, 1.0);
  EXPECT_FALSE(becomes_ready_within(b));
  EXPECT_FALSE(a.is_ready());
  EXPECT_FALSE(held.is_ready());
  // Shape, dtype and storage exist at once; only the values are pending.
  EXPECT_EQ(b.shape(), Shape({8}));
  EXPECT_NE(b.storage(), nullptr);
  EXPECT_TRUE(gate.wait_entered());
  EXPECT_GE(Engine::get().stats().queue_depth, 3u);
  gate.open();
  EXPECT_EQ(b.to_vector(), std::vector<float>(8, 2.0f));
  EXPECT_TRUE(a.is_ready());
  EXPECT_TRUE(b.is_ready());
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(EngineBasics, HostDataIsReadyAtOnce) {
  Tensor x = from_data({1, 2, 3}, {3});
  EXPECT_TRUE(x.is_ready());
  EXPECT_EQ(x.to_vector(), (std::vector<float>{1, 2, 3}));
}

TEST_F(EngineBasics, FifoWithinAStream) {
  // Gates on distinct tensors share no storage, so only FIFO order can serialise them.
  constexpr int n = 64;
  std::mutex mu;
  std::vector<int> order;
  Gate first;
  std::vector<Tensor> ts;
  for (int i = 0; i < n; ++i) ts.push_back(zeros({1}));
  first.hold(ts[0], [&] {
    std::lock_guard lock(mu);
    order.push_back(0);
  });
  for (int i = 1; i < n; ++i)
    debug::gate(ts[size_t(i)], [&, i] {
      std::lock_guard lock(mu);
      order.push_back(i);
    });
  first.open();
  Stream::default_stream().synchronize();
  std::lock_guard lock(mu);
  ASSERT_EQ(order.size(), size_t(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(order[size_t(i)], i);
}

TEST_F(EngineBasics, TwoStreamsRunConcurrently) {
  // A task on A waits for a flag that a task on B sets: if the engine ran them one after
  // the other, A's wait would time out (recorded, not hung).
  Stream a = test_stream(0), b = test_stream(1);
  Tensor ta = zeros({1}), tb = zeros({1});
  Flag a_started, b_done;
  std::atomic<bool> a_saw_b{false}, b_saw_a{false};
  {
    StreamGuard g(a);
    debug::gate(ta, [&] {
      a_started.set();
      a_saw_b = b_done.wait_for(kWaitTimeout);
    });
  }
  {
    StreamGuard g(b);
    debug::gate(tb, [&] {
      b_saw_a = a_started.wait_for(kWaitTimeout);  // both are running at the same time
      b_done.set();
    });
  }
  ta.wait_to_read();
  tb.wait_to_read();
  EXPECT_TRUE(b_saw_a.load());
  EXPECT_TRUE(a_saw_b.load());
}

TEST_F(EngineBasics, IndependentWorkOnAnotherStreamIsNotHeldBack) {
  Tensor held = zeros({1});
  Gate gate;
  gate.hold(held);  // default stream held
  Tensor y;
  {
    StreamGuard g(test_stream(0));
    y = add(from_data({1, 2}, {2}), 1.0);
  }
  // No storage shared with the held stream: completes while the gate is closed.
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 3}));
  EXPECT_FALSE(held.is_ready());
  gate.open();
  held.wait_to_read();
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(EngineBasics, StreamGuardSelectsTheCurrentStream) {
  Stream s = test_stream(2);
  EXPECT_EQ(Stream::current(), Stream::default_stream());
  {
    StreamGuard g(s);
    EXPECT_EQ(Stream::current(), s);
    {
      StreamGuard g2(test_stream(3));
      EXPECT_EQ(Stream::current(), test_stream(3));
    }
    EXPECT_EQ(Stream::current(), s);
  }
  EXPECT_EQ(Stream::current(), Stream::default_stream());
  EXPECT_NE(s.id(), Stream::default_stream().id());
  EXPECT_TRUE(s.device().is_cpu());
  // The guard is per thread.
  std::thread([&] {
    StreamGuard g(s);
    EXPECT_EQ(Stream::current(), s);
  }).join();
  EXPECT_EQ(Stream::current(), Stream::default_stream());
}

// cuda:12: no machine has it and no test installs a fake there (cuda:0 may be a real GPU,
// where this suite runs too).
TEST_F(EngineBasics, StreamsOnAMissingGpuAreRefused) {
  EXPECT_TRUE(contains(error_of([] { Stream::create(Device::cuda(12)); }), "[stream]"));
  EXPECT_TRUE(contains(error_of([] { Stream::default_stream(Device::cuda(12)); }), "[stream]"));
}

TEST_F(EngineBasics, StreamCountersAdvance) {
  Stream s = test_stream(2);
  StreamGuard g(s);
  uint64_t q0 = s.queued();
  EngineStats e0 = Engine::get().stats();
  Tensor x = ones({16});
  for (int i = 0; i < 9; ++i) x = add(x, 1.0);
  EXPECT_EQ(s.queued(), q0 + 10);
  EXPECT_EQ(Engine::get().stats().queued, e0.queued + 10);
  s.synchronize();
  EXPECT_EQ(s.executed(), s.queued());
  EXPECT_EQ(x.to_vector(), std::vector<float>(16, 10.0f));
}

TEST_F(EngineBasics, EventQueryAndSynchronize) {
  Event none;
  EXPECT_FALSE(none.valid());
  EXPECT_TRUE(none.query());
  none.synchronize();  // a no-op

  Stream s = test_stream(0);
  StreamGuard g(s);
  Tensor held = zeros({1});
  Gate gate;
  gate.hold(held);
  Tensor y = add(held, 1.0);
  Event e = s.record();
  EXPECT_TRUE(e.valid());
  EXPECT_FALSE(e.query());
  gate.open();
  e.synchronize();
  EXPECT_TRUE(e.query());
  EXPECT_TRUE(y.is_ready());  // recorded after y's op
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(EngineBasics, EventRecordedBeforeLaterWorkDoesNotWaitForIt) {
  Stream s = test_stream(0);
  StreamGuard g(s);
  Tensor x = add(ones({4}), 1.0);
  Event before = s.record();
  Tensor held = zeros({1});
  Gate gate;
  gate.hold(held);
  // The event marks only the work queued before it.
  before.synchronize();
  EXPECT_TRUE(before.query());
  EXPECT_FALSE(s.record().query());
  gate.open();
  s.synchronize();
  EXPECT_TRUE(s.record().query());
}

TEST_F(EngineBasics, StreamWaitOrdersWorkAcrossStreams) {
  // B waits for an event on A without blocking the host; B's later op runs after A's gate.
  Stream a = test_stream(0), b = test_stream(1);
  Tensor ta = zeros({1}), tb = zeros({1});
  Gate gate;
  std::atomic<bool> a_finished{false};
  Event e;
  {
    StreamGuard g(a);
    gate.hold(ta, [&] { a_finished = true; });
    e = a.record();
  }
  std::atomic<bool> b_saw_a_finished{false};
  {
    StreamGuard g(b);
    b.wait(e);  // returns at once
    debug::gate(tb, [&] { b_saw_a_finished = a_finished.load(); });
  }
  // Held by the event, although tb shares nothing with ta.
  EXPECT_FALSE(becomes_ready_within(tb));
  gate.open();
  tb.wait_to_read();
  EXPECT_TRUE(b_saw_a_finished.load());
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(EngineBasics, StreamWaitOnItsOwnEventIsANoop) {
  Stream a = test_stream(0);
  StreamGuard g(a);
  uint64_t q = a.queued();
  a.wait(a.record());
  a.wait(Event());
  EXPECT_EQ(a.queued(), q);
}

TEST_F(EngineBasics, SynchronizeWaitsForEveryStream) {
  Tensor x, y;
  {
    StreamGuard g(test_stream(0));
    x = add(ones({1000}), 1.0);
  }
  {
    StreamGuard g(test_stream(1));
    y = add(ones({1000}), 2.0);
  }
  Engine::get().synchronize();
  EXPECT_TRUE(x.is_ready());
  EXPECT_TRUE(y.is_ready());
  EXPECT_EQ(Engine::get().stats().queue_depth, 0u);
  EXPECT_EQ(y.to_vector()[999], 3.0f);
}

TEST_F(EngineBasics, LongChainsSpanManyTaskSegments) {
  // More ops than one task segment holds, twice over, with storages recycled as we go.
  Tensor x = zeros({4});
  Tensor one = ones({4});
  for (int i = 0; i < 1500; ++i) x = add(x, one);
  EXPECT_EQ(x.to_vector(), std::vector<float>(4, 1500.0f));
  for (int i = 0; i < 700; ++i) x.add_(one);
  EXPECT_EQ(x.to_vector(), std::vector<float>(4, 2200.0f));
}

// A stress test, disabled by default (slow, and a broken protocol shows up only sometimes):
// a frontend that only polls is_ready() must see every op run. end_task publishes with a
// release store and reads `sleeping` behind only a light fence; the worker that goes to
// sleep pairs it with a heavy one (core/engine/asymmetric_fence.h). Without that pairing a worker
// going to sleep at that moment can miss the wake-up; wait_pos would repair it, but
// is_ready, Event::query and Engine::stats do not, and the op would never run. The delay
// sweeps the moment the idle worker gives up (spin kSpinNs, yield kYieldNs, then sleep).
// Run with --gtest_also_run_disabled_tests.
TEST_F(EngineBasics, DISABLED_PollingNeverMissesAWakeUp_Stress) {
  StreamImpl* s = Stream::default_stream().impl();
  Tensor x = zeros({1});
  x.wait_to_read();
  int lost = 0;
  for (int i = 0; i < 5000 && lost == 0; ++i) {
    while (!x.is_ready()) {
    }
    // Submit around the time the worker gives up spinning and goes to sleep.
    auto t0 = std::chrono::steady_clock::now();
    auto delay =
        std::chrono::nanoseconds(detail::kSpinNs + detail::kYieldNs - 20000 + (i * 37) % 40000);
    while (std::chrono::steady_clock::now() - t0 < delay) {
    }
    x.add_(x);
    // Poll only. A worker asleep with published work for 20 ms has lost its wake-up.
    auto t1 = std::chrono::steady_clock::now();
    while (!x.is_ready()) {
      if (std::chrono::steady_clock::now() - t1 > 20ms && s->sleeping.load() &&
          s->published.load() > s->completed.load()) {
        ++lost;
        ADD_FAILURE() << "iteration " << i << ": the worker sleeps with published work ("
                      << s->published.load() << " published, " << s->completed.load()
                      << " completed) and nothing wakes it";
        x.wait_to_read();  // wait_pos repairs the wake-up
        break;
      }
    }
  }
  EXPECT_EQ(lost, 0);
}

}  // namespace
}  // namespace tide
