// Shutdown (docs/architecture.md, Engine): drain runs queued work first, cancel skips what has not
// started (its outputs fail with "cancelled"); both return with 100 000 ops queued, and the engine
// restarts on the next submit. Tensors dropped while their ops are queued are safe. A
// submit stalled by backpressure across a shutdown still runs; a static Tensor outlives
// the thread-local caches at exit safely.
//
// The gate that holds the stream here waits, bounded, until shutdown has told the worker
// to stop (engine_impl.h exposes the flag for such white-box checks), so that the 100 000
// ops are certainly still queued when shutdown starts.
#include <future>
#include <thread>

#include "core/engine/engine_impl.h"
#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class Shutdown : public EngineTest {};

constexpr int kQueued = 100000;

// What a gate held until shutdown saw: that it started, and that shutdown came.
struct HeldUntilShutdown {
  Flag entered;
  std::atomic<bool> saw{false};
};

// Queues a gate on the current stream that returns once shutdown has set the stream's
// stop flag to `mode` (1 drain, 2 cancel). Fails its op after a minute. Callers wait for
// `entered` before shutting down: a cancel skips a gate that has not started.
std::shared_ptr<HeldUntilShutdown> hold_until_shutdown(const Tensor& t, int mode) {
  auto h = std::make_shared<HeldUntilShutdown>();
  StreamImpl* s = Stream::current().impl();
  debug::gate(t, [s, mode, h] {
    h->entered.set();
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (s->stop.load() != mode) {
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("gate timed out: shutdown never came");
      std::this_thread::sleep_for(100us);
    }
    h->saw = true;
  });
  return h;
}

TEST_F(Shutdown, DrainRunsEverythingQueuedThenRestarts) {
  Tensor tag = zeros({1}), x = zeros({1}), one = ones({1});
  Engine& eng = Engine::get();
  eng.synchronize();
  auto held = hold_until_shutdown(tag, 1);
  for (int i = 0; i < kQueued; ++i) x.add_(one);
  EXPECT_GE(eng.stats().queue_depth, uint64_t(kQueued));
  EXPECT_TRUE(held->entered.wait_for());
  eng.shutdown(ShutdownMode::drain);
  EXPECT_TRUE(held->saw.load());
  EXPECT_EQ(eng.stats().queue_depth, 0u);
  EXPECT_EQ(x.item(), float(kQueued));
  EXPECT_NO_THROW(tag.wait_to_read());
  // The engine restarts on the next submit.
  EXPECT_EQ(add(ones({3}), 1.0).to_vector(), std::vector<float>(3, 2.0f));
  x.add_(one);
  EXPECT_EQ(x.item(), float(kQueued + 1));
}

TEST_F(Shutdown, CancelSkipsQueuedWorkAndFailsItsOutputs) {
  Tensor tag = zeros({1}), x = zeros({1}), one = ones({1});
  Engine& eng = Engine::get();
  eng.synchronize();
  const uint64_t failures0 = eng.stats().failures;
  auto held = hold_until_shutdown(tag, 2);
  for (int i = 0; i < kQueued; ++i) x.add_(one);
  std::vector<Tensor> ys;
  for (int i = 0; i < 100; ++i) ys.push_back(add(one, double(i)));
  Tensor cross;
  {
    StreamGuard g(test_stream(0));
    cross = mul(x, 2.0);  // another stream, waiting for x
  }
  EXPECT_FALSE(cross.is_ready());
  ASSERT_TRUE(held->entered.wait_for());
  eng.shutdown(ShutdownMode::cancel);
  EXPECT_TRUE(held->saw.load());
  EXPECT_EQ(eng.stats().queue_depth, 0u);
  EXPECT_NO_THROW(tag.wait_to_read());  // it was running: it completed
  std::string m = error_of([&] { x.item(); });
  EXPECT_TRUE(contains(m, "[add_]"));
  EXPECT_TRUE(contains(m, "cancelled"));
  EXPECT_TRUE(contains(m, "test_shutdown.cpp:"));
  for (const Tensor& y : ys)
    EXPECT_TRUE(contains(error_of([&] { y.wait_to_read(); }), "cancelled"));
  EXPECT_TRUE(contains(error_of([&] { cross.wait_to_read(); }), "cancelled"));
  EXPECT_GT(eng.stats().failures, failures0 + 100);
  EXPECT_EQ(one.item(), 1.0f);  // written before the gate: untouched
  // The engine restarts and works normally.
  EXPECT_EQ(add(ones({3}), 1.0).to_vector(), std::vector<float>(3, 2.0f));
  Tensor z;
  {
    StreamGuard g(test_stream(0));
    z = add(one, 2.0);
  }
  EXPECT_EQ(z.item(), 3.0f);
}

TEST_F(Shutdown, WithNothingQueuedAndTwice) {
  Engine& eng = Engine::get();
  eng.shutdown();
  eng.shutdown(ShutdownMode::cancel);
  eng.shutdown();
  EXPECT_EQ(mul(from_data({2}, {1}), 3.0).item(), 6.0f);
}

TEST_F(Shutdown, WhileAnotherThreadSubmits) {
  // Shutdown and submits from another thread interleave: nothing is lost or hung.
  Tensor x = zeros({8}), one = ones({8});
  Engine::get().synchronize();
  Flag started;
  std::thread submitter([&] {
    for (int i = 0; i < 3000; ++i) {
      x.add_(one);
      if (i == 10) started.set();
    }
  });
  ASSERT_TRUE(started.wait_for());
  for (int i = 0; i < 5; ++i) Engine::get().shutdown(ShutdownMode::drain);
  submitter.join();
  EXPECT_EQ(x.to_vector(), std::vector<float>(8, 3000.0f));
}

TEST_F(Shutdown, TensorsDroppedWhileQueuedAreSafe) {
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  const size_t active0 = Allocator::get().stats().active_bytes;
  Gate gate;
  gate.hold(tag);
  Tensor out;
  {
    Tensor a = ones({1000});
    Tensor b = add(a, 1.0);
    Tensor c = mul(b, b);
    out = sum(c);
    Tensor d = exp(a);  // an output nobody keeps
  }
  {
    Tensor a = ones({1000});
    for (int i = 0; i < 100; ++i) a = add(a, 1.0);  // every handle dropped
    Tensor f = zeros({1000});
    debug::fail(a, f, "dropped failure");  // a failure nobody will read
  }
  EXPECT_FALSE(out.is_ready());
  gate.open();
  EXPECT_EQ(out.item(), 4000.0f);
  Engine::get().synchronize();
  EXPECT_EQ(Allocator::get().stats().active_bytes, active0 + Allocator::round_size(4));
  EXPECT_EQ(Engine::get().stats().inflight_bytes, 0u);
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(Shutdown, DroppedTensorsWithAShutdownInBetween) {
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  auto held = hold_until_shutdown(tag, 2);
  {
    Tensor a = ones({4096});
    for (int i = 0; i < 1000; ++i) a = mul(a, 1.0);
  }
  ASSERT_TRUE(held->entered.wait_for());
  Engine::get().shutdown(ShutdownMode::cancel);
  EXPECT_TRUE(held->saw.load());
  Engine::get().synchronize();
  EXPECT_EQ(Engine::get().stats().inflight_bytes, 0u);
}

// Issue 11 item 9: a submit stalled on max_inflight_ops while another thread shuts the
// engine down used to be published on a stream whose worker had gone: it never ran and an
// item() on it waited for ever. Repeated, since the stalled thread and the stopping
// worker race. A lost task is rescued (a later submit restarts the worker) so that the
// test fails instead of hanging.
TEST_F(Shutdown, SubmitStalledByBackpressureRunsAfterAShutdown) {
  Engine& eng = Engine::get();
  for (int round = 0; round < 20; ++round) {
    Tensor tag = zeros({1});
    eng.synchronize();
    eng.set_max_inflight_ops(2);
    auto held = hold_until_shutdown(tag, 1);
    ASSERT_TRUE(held->entered.wait_for());
    const uint64_t stalls = eng.stats().backpressure_stalls;
    auto stalled = std::async(std::launch::async, [] {
      Tensor a = ones({1});    // the second op in flight
      Tensor b = add(a, 1.0);  // over the bound: stalls until the gate has run
      return b.item();
    });
    ASSERT_TRUE(wait_until([&] { return eng.stats().backpressure_stalls > stalls; }));
    eng.shutdown(ShutdownMode::drain);
    const bool ran = stalled.wait_for(kWaitTimeout) == std::future_status::ready;
    eng.set_max_inflight_ops(0);
    if (!ran) {
      ADD_FAILURE() << "round " << round << ": the stalled submit never ran after the shutdown";
      zeros({1}).item();  // restarts the worker, which then runs the lost task
    }
    EXPECT_EQ(stalled.get(), 2.0f) << "round " << round;
  }
}

// Issue 11 item 7: a static Tensor is destroyed after the main thread's thread_locals
// (the TensorImpl block cache): freeing its impl must not use the destroyed cache.
// The child process exits through std::exit, which runs both; ASan reports a
// use-after-free there as a crash.
TEST(ShutdownDeathTest, StaticTensorOutlivesTheThreadLocalCacheAtExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        static Tensor kept = add(ones({16}), 1.0);
        static Tensor view = kept.reshape({4, 4});
        if (sum(view).item() != 32.0f) std::exit(3);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tide
