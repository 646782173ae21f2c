// Host syncs run the awaited tasks themselves when the stream's worker does not run
// (Engine::State::sync_pos): the worker is held with the white-box switch
// StreamImpl::worker_held, as if it could not get a core. What is checked: the sync returns
// with the right values, run on the waiting thread; it runs only up to what it waits for;
// work it leaves behind reaches a sleeping worker; cross-stream waits are run through;
// failures surface as from the worker; and many threads syncing on one stream while its
// worker is held and released at random get exact results.
#include <random>
#include <thread>

#include "core/engine/engine_impl.h"
#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class WaiterRuns : public EngineTest {
 protected:
  void TearDown() override {
    holds_.release_all();
    EngineTest::TearDown();
  }
  StreamImpl* hold(const Stream& st) { return holds_.hold(st); }
  static void release(StreamImpl* s) { WorkerHolds::release(s); }

 private:
  WorkerHolds holds_;
};

// The id of the thread that runs an op queued on the current stream.
struct RunThread {
  explicit RunThread(const Tensor& t) : id(std::make_shared<std::atomic<std::thread::id>>()) {
    auto out = id;
    debug::gate(t, [out] { out->store(std::this_thread::get_id()); });
  }
  std::thread::id get() const { return id->load(); }
  std::shared_ptr<std::atomic<std::thread::id>> id;
};

TEST_F(WaiterRuns, HostSyncRunsQueuedOpsWhileTheWorkerCannotRun) {
  // The same chain with the worker free, as the reference (bit-identical results).
  auto chain = [] {
    Tensor y = from_data({1, 2, 3}, {3});
    for (int i = 0; i < 100; ++i) y = add(mul(y, 1.01), 0.5);
    return y;
  };
  std::vector<float> expected = chain().to_vector();

  hold(Stream::default_stream());
  Tensor y = chain();
  RunThread who(y);
  EXPECT_FALSE(becomes_ready_within(y, 50ms)) << "the held worker ran the ops";
  EXPECT_EQ(y.to_vector(), expected);
  EXPECT_EQ(who.get(), std::this_thread::get_id());
  Tensor first = y[0];
  EXPECT_EQ(first.item(), expected[0]);
}

TEST_F(WaiterRuns, ASyncRunsOnlyUpToWhatItWaitsFor) {
  StreamImpl* s = hold(Stream::default_stream());
  Tensor a = full({4}, 1.0);
  a.add_(a);
  Tensor b = full({4}, 5.0);
  b.add_(b);  // queued after a's last write
  EXPECT_EQ(a.to_vector(), std::vector<float>(4, 2.0f));
  EXPECT_FALSE(becomes_ready_within(b, 50ms)) << "the sync on a ran b's ops too";
  release(s);
  EXPECT_TRUE(becomes_ready_within(b, kWaitTimeout)) << "the released worker did not run b";
  EXPECT_EQ(b.to_vector(), std::vector<float>(4, 10.0f));
}

TEST_F(WaiterRuns, WorkLeftBehindWakesASleepingWorker) {
  StreamImpl* s = hold(Stream::default_stream());
  ASSERT_TRUE(wait_until([&] { return s->sleeping.load(); })) << "the idle worker never slept";
  Tensor a = full({4}, 1.0);
  Tensor b = full({4}, 3.0);
  b.add_(b);
  // The submits woke the worker; it finds no work it may take and sleeps again.
  ASSERT_TRUE(wait_until([&] { return s->sleeping.load(); }));
  s->worker_held.store(false);  // no wake: only the waiter's can start the worker now
  EXPECT_EQ(a.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_TRUE(becomes_ready_within(b, kWaitTimeout))
      << "the work after a stayed queued: the waiter did not wake the sleeping worker";
  EXPECT_EQ(b.to_vector(), std::vector<float>(4, 6.0f));
}

TEST_F(WaiterRuns, CrossStreamWaitsAreRunThrough) {
  Stream producer = test_stream(0), consumer = test_stream(1);
  hold(producer);
  hold(consumer);
  Tensor x, y;
  std::unique_ptr<RunThread> who_x;
  {
    StreamGuard g(producer);
    x = full({8}, 2.0);
    x.mul_(x);  // 4
    who_x = std::make_unique<RunThread>(x);
  }
  {
    StreamGuard g(consumer);
    y = add(x, 1.0);  // waits for the producer's writes
  }
  EXPECT_FALSE(becomes_ready_within(y, 50ms)) << "a held worker ran";
  // The sync runs y's task, whose wait for the producer runs the producer's tasks too.
  EXPECT_EQ(y.to_vector(), std::vector<float>(8, 5.0f));
  EXPECT_EQ(who_x->get(), std::this_thread::get_id());
  EXPECT_EQ(x.to_vector(), std::vector<float>(8, 4.0f));
}

TEST_F(WaiterRuns, AFailureRunByTheWaiterSurfacesAsFromTheWorker) {
  hold(Stream::default_stream());
  Tensor x = zeros({2});
  debug::gate(x, [] { throw std::runtime_error("boom in a held stream"); });
  Tensor y = add(x, 1.0);
  std::string msg = error_of([&] { y.to_vector(); });
  EXPECT_TRUE(contains(msg, "boom in a held stream")) << msg;
  Engine::get().wait_all();  // reported once, by the read, as for the worker's failures
  // The stream goes on: later ops run, by the waiter again.
  Tensor z = full({1}, 7.0);
  EXPECT_EQ(z.item(), 7.0f);
}

// Real concurrency: four threads each add into their own tensor and sync after every op,
// on the default stream, while a fifth holds and releases the worker at random, so the
// tasks are run by the worker and by every waiter in turn. The counts must be exact.
TEST_F(WaiterRuns, ThreadsSyncingOnOneStreamWhileItsWorkerComesAndGoes) {
  StreamImpl* s = Stream::default_stream().impl();
  constexpr int kThreads = 4, kSteps = 300;
  std::atomic<bool> done{false};
  std::thread toggler([&] {
    std::mt19937 rng(7);
    while (!done.load()) {
      s->worker_held.store(rng() % 2 == 0);
      s->wake();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    }
  });
  std::vector<float> got(kThreads), read_back(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Tensor x = zeros({1});
      Tensor one = ones({1});
      float last = 0;
      for (int i = 0; i < kSteps; ++i) {
        x.add_(one);
        last = x.item();
        if (last != float(i + 1)) break;
      }
      got[size_t(t)] = last;
    });
  for (auto& th : threads) th.join();
  done.store(true);
  toggler.join();
  release(s);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[size_t(t)], float(kSteps)) << "thread " << t;
}

}  // namespace
}  // namespace tide
