// Several frontend threads enqueueing at once: each its own chain, plus one shared tensor
// that every thread updates in place (each in its own row), on the default stream and on
// one stream per thread. The results are deterministic whatever the interleaving.
#include <latch>
#include <thread>

#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class Threads : public EngineTest {};

constexpr int kThreads = 4;
constexpr int kSteps = 200;
constexpr int64_t kWidth = 256;

void run_frontends(bool own_streams) {
  Tensor shared = zeros({kThreads, kWidth});
  std::vector<Tensor> chains(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      StreamGuard g(own_streams ? test_stream(t) : Stream::default_stream());
      Tensor row = shared[t];  // a view: every thread writes the same storage
      Tensor one = ones({kWidth});
      Tensor x = full({kWidth}, double(t));
      start.arrive_and_wait();  // all four enqueue at once
      for (int i = 0; i < kSteps; ++i) {
        x = add(mul(x, 1.0), one);
        row.add_(one);
      }
      chains[size_t(t)] = x;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(chains[size_t(t)].to_vector(), std::vector<float>(kWidth, float(t + kSteps)))
        << "thread " << t;
    EXPECT_EQ(shared[t].to_vector(), std::vector<float>(kWidth, float(kSteps))) << "row " << t;
  }
}

TEST_F(Threads, FourFrontendsOnTheDefaultStream) { run_frontends(false); }

TEST_F(Threads, FourFrontendsOnTheirOwnStreams) { run_frontends(true); }

TEST_F(Threads, ThreadsAddIntoOneTensorInPlace) {
  // All threads add into the whole of one tensor: in-place writes on one storage from
  // four streams are serialised by the hazard tracking, so no update is lost.
  Tensor acc = zeros({64});
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      StreamGuard g(test_stream(t));
      Tensor inc = full({64}, double(t + 1));
      start.arrive_and_wait();
      for (int i = 0; i < 100; ++i) acc.add_(inc);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(acc.to_vector(), std::vector<float>(64, 100.0f * (1 + 2 + 3 + 4)));
}

TEST_F(Threads, ManyThreadsWaitOnOneTensor) {
  Tensor x = from_data({1}, {1});
  Gate gate;
  gate.hold(x);
  x.mul_(7.0);
  std::vector<float> seen(kThreads, 0.0f);
  std::latch waiting(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      waiting.count_down();
      seen[size_t(t)] = x.item();  // all block on the same position
    });
  waiting.wait();
  gate.open();
  for (auto& th : threads) th.join();
  for (float v : seen) EXPECT_EQ(v, 7.0f);
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(Threads, ThreadsSyncOnEachOthersWork) {
  // Thread 0 produces on its stream; the others consume its result on theirs.
  Tensor produced;
  Flag ready;
  std::vector<Tensor> consumed(kThreads);
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    StreamGuard g(test_stream(0));
    Tensor x = ones({128});
    for (int i = 0; i < 50; ++i) x = add(x, 1.0);
    produced = x;
    ready.set();
  });
  for (int t = 1; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      if (!ready.wait_for()) return;
      StreamGuard g(test_stream(t));
      consumed[size_t(t)] = mul(produced, double(t));  // read-after-write across streams
    });
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) {
    ASSERT_TRUE(consumed[size_t(t)].defined());
    EXPECT_EQ(consumed[size_t(t)].to_vector(), std::vector<float>(128, 51.0f * float(t)));
  }
}

TEST_F(Threads, WaitAllFromSeveralThreads) {
  std::vector<std::thread> threads;
  std::vector<float> out(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      StreamGuard g(test_stream(t));
      Tensor x = full({1000}, double(t));
      for (int i = 0; i < 20; ++i) x = add(x, 1.0);
      wait_all();
      EXPECT_TRUE(x.is_ready());
      out[size_t(t)] = x.to_vector()[999];
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(out[size_t(t)], float(t + 20));
}

// Issue 11 item 10: a host read (to_vector, item) is a reader of its tensor, so an
// in-place write another thread queues while the read copies waits for it. Before, 5 of
// 200 reads were torn (and TSan reported the race): each write sets every element to the
// same value, so a read that mixes values saw half a write.
TEST_F(Threads, HostReadsAreNotTornByAnotherThreadsInPlaceWrites) {
  constexpr int64_t n = 1 << 16;
  Tensor x = zeros({n});
  x.wait_to_read();
  Engine::get().set_max_inflight_ops(64);  // the writer runs at most this far ahead
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int k = 1; !done.load(); ++k) x.copy_(full({n}, double(k % 1000)));
  });
  int torn = 0;
  for (int r = 0; r < 200; ++r) {
    const std::vector<float> v = x.to_vector();
    for (float e : v)
      if (e != v[0]) {
        ++torn;
        break;
      }
  }
  done = true;
  writer.join();
  EXPECT_EQ(torn, 0) << "reads that saw half of an in-place write";
}

}  // namespace
}  // namespace tide
