// Errors (docs/contributing.md, Errors): argument errors throw at the call and queue nothing; a
// failure inside a queued op is stored in its outputs, inherited by the ops that read them
// (which are skipped), and rethrown with the op and the queue site by the sync that touches
// it; wait_all() reports the earliest unreported failure once; memory limits wait for
// queued work and throw "out of memory" only when nothing is left in flight.
#include <sstream>
#include <thread>

#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class Errors : public EngineTest {};

std::string site_of(int line) { return "test_errors.cpp:" + std::to_string(line); }

TEST_F(Errors, ArgumentErrorsThrowAtTheCallAndQueueNothing) {
  Tensor a = zeros({2, 3}), b = zeros({4}), i = zeros({2, 3}, DType::int32);
  Tensor d = zeros({2, 3}, DType::float64);
  Engine::get().synchronize();
  const uint64_t queued = Engine::get().stats().queued;
  const uint64_t allocs = Allocator::get().stats().num_allocs;

  std::string m = error_of([&] { add(a, b); });
  EXPECT_TRUE(contains(m, "[add]"));
  EXPECT_TRUE(contains(m, "(2, 3)"));
  EXPECT_TRUE(contains(m, "(4,)"));
  EXPECT_TRUE(contains(error_of([&] { add(a, d); }), "[add] dtypes differ"));
  EXPECT_TRUE(contains(error_of([&] { mul(a, Tensor()); }), "[mul]"));
  EXPECT_TRUE(contains(error_of([&] { matmul(a, a); }), "[matmul] inner dimensions differ"));
  EXPECT_TRUE(contains(error_of([&] { matmul(b, b); }), "[matmul]"));
  EXPECT_TRUE(contains(error_of([&] { exp(i); }), "[exp]"));
  EXPECT_TRUE(contains(error_of([&] { a.reshape({5}); }), "[reshape]"));
  EXPECT_TRUE(contains(error_of([&] { a.slice(1, 3); }), "[slice]"));
  EXPECT_TRUE(contains(error_of([&] { a[2]; }), "[select]"));
  EXPECT_TRUE(contains(error_of([&] { a.item(); }), "[item]"));
  EXPECT_TRUE(contains(error_of([&] { randn({2}, DType::int32); }), "[randn]"));
  EXPECT_TRUE(contains(error_of([&] { from_data({1, 2, 3}, {2}); }), "[from_data]"));
  EXPECT_TRUE(contains(error_of([&] { a.add_(b); }), "[add_]"));
  EXPECT_TRUE(contains(error_of([&] { sum(a, 5); }), "[sum]"));
  EXPECT_TRUE(contains(error_of([&] { arange(0.0, 1.0, 0.0); }), "[arange]"));
  EXPECT_TRUE(contains(error_of([&] { debug::fail(Tensor(), a, "x"); }), "[fail]"));
  EXPECT_TRUE(contains(error_of([&] { debug::gate(Tensor(), [] {}); }), "[gate]"));
  try {
    add(a, b);
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "add");
  }

  EXPECT_EQ(Engine::get().stats().queued, queued);
  EXPECT_EQ(Allocator::get().stats().num_allocs, allocs);
}

// Each sync point rethrows a queued failure with the op, the message and the queue site.
TEST_F(Errors, FailureSurfacesAtEverySyncPoint) {
  struct Case {
    const char* name;
    std::function<void(const Tensor&)> sync;
  };
  std::vector<Case> cases = {
      {"item", [](const Tensor& t) { t.item(); }},
      {"to_vector", [](const Tensor& t) { t.to_vector(); }},
      {"wait_to_read", [](const Tensor& t) { t.wait_to_read(); }},
      {"operator<<",
       [](const Tensor& t) {
         std::ostringstream os;
         os << t;
       }},
      {"item<int64_t>", [](const Tensor& t) { t.item<int64_t>(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = ones({1});
    Tensor y = zeros({1});
    const int line = __LINE__ + 1;
    debug::fail(x, y, "injected failure");
    std::string m = error_of([&] { c.sync(y); });
    EXPECT_TRUE(contains(m, "[fail]"));
    EXPECT_TRUE(contains(m, "injected failure"));
    EXPECT_TRUE(contains(m, site_of(line)));
    // The tensor keeps its failure: a second sync rethrows it too.
    EXPECT_TRUE(contains(error_of([&] { c.sync(y); }), "injected failure"));
    // The input is untouched.
    EXPECT_EQ(x.item(), 1.0f);
  }
}

TEST_F(Errors, RethrownErrorNamesTheOp) {
  Tensor y = zeros({1});
  debug::fail(ones({1}), y, "m");
  try {
    y.wait_to_read();
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "fail");
  }
}

TEST_F(Errors, KernelExceptionsFailTheOp) {
  Tensor t = zeros({1});
  const int line = __LINE__ + 1;
  debug::gate(t, [] { throw std::runtime_error("kernel says no"); });
  std::string m = error_of([&] { t.wait_to_read(); });
  EXPECT_TRUE(contains(m, "[gate] kernel says no"));
  EXPECT_TRUE(contains(m, site_of(line)));

  Tensor u = zeros({1});
  debug::gate(u, [] { throw 42; });  // not a std::exception
  EXPECT_TRUE(contains(error_of([&] { u.wait_to_read(); }), "[gate] unknown exception"));
}

TEST_F(Errors, DependentsAreSkippedAndInheritTheFailure) {
  const uint64_t failures0 = Engine::get().stats().failures;
  Tensor x = ones({4});
  Tensor y = zeros({4});
  const int line = __LINE__ + 1;
  debug::fail(x, y, "root cause");
  auto ran = std::make_shared<std::atomic<bool>>(false);
  Tensor z = add(y, 1.0);                  // skipped
  debug::gate(z, [ran] { *ran = true; });  // skipped: its body must not run
  Tensor w = mul(z, 2.0);                  // skipped
  Tensor v = add(w, x);                    // skipped, although x is fine
  std::string m = error_of([&] { v.wait_to_read(); });
  // The dependent reports the original failure: op, message and site.
  EXPECT_TRUE(contains(m, "[fail] root cause"));
  EXPECT_TRUE(contains(m, site_of(line)));
  EXPECT_TRUE(contains(error_of([&] { z.to_vector(); }), "root cause"));
  Engine::get().synchronize();
  EXPECT_FALSE(ran->load());
  // EngineStats::failures counts failed tasks and tasks skipped because an input failed.
  EXPECT_EQ(Engine::get().stats().failures, failures0 + 5);
}

TEST_F(Errors, IndependentWorkCompletes) {
  Tensor y = zeros({4});
  debug::fail(ones({4}), y, "boom");
  Tensor a = from_data({1, 2, 3, 4}, {4});
  Tensor b = mul(add(a, 1.0), 2.0);  // same stream, after the failure, unrelated
  Tensor c;
  {
    StreamGuard g(test_stream(0));
    c = add(a, a);
  }
  EXPECT_EQ(b.to_vector(), (std::vector<float>{4, 6, 8, 10}));
  EXPECT_EQ(c.to_vector(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_TRUE(contains(error_of([&] { y.wait_to_read(); }), "boom"));
}

TEST_F(Errors, FailurePropagatesAcrossStreams) {
  Tensor tag = zeros({1});
  Gate gate;
  Tensor y = zeros({8});
  int line = 0;
  {
    StreamGuard g(test_stream(0));
    gate.hold(tag);
    line = __LINE__ + 1;
    debug::fail(ones({8}), y, "on stream A");
  }
  Tensor z;
  {
    StreamGuard g(test_stream(1));
    z = add(y, 1.0);  // waits for A, then inherits
  }
  EXPECT_FALSE(becomes_ready_within(z));
  gate.open();
  std::string m = error_of([&] { z.wait_to_read(); });
  EXPECT_TRUE(contains(m, "on stream A"));
  EXPECT_TRUE(contains(m, site_of(line)));
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(Errors, InPlaceUpdatesOfAFailedTensorStayFailed) {
  Tensor x = zeros({4});
  debug::fail(ones({4}), x, "poisoned");
  Tensor one = ones({4});
  for (int i = 0; i < 10; ++i) x.add_(one);
  EXPECT_TRUE(contains(error_of([&] { x.wait_to_read(); }), "poisoned"));
  EXPECT_EQ(one.to_vector(), std::vector<float>(4, 1.0f));
}

TEST_F(Errors, ReusedBlocksDoNotCarryAFailure) {
  // A failed storage goes back to the cache; whoever gets the block next starts clean.
  constexpr int64_t n = 12345;  // an unusual size class, so reuse is likely
  {
    Tensor x = zeros({n});
    debug::fail(ones({1}), x, "old failure");
    EXPECT_THROW(x.wait_to_read(), Error);
  }
  Engine::get().synchronize();
  for (int i = 0; i < 4; ++i) {
    Tensor y = full({n}, 3.0);
    EXPECT_EQ(y.to_vector()[size_t(n - 1)], 3.0f);
  }
}

TEST_F(Errors, WaitAllRethrowsTheEarliestUnreportedFailureOnce) {
  Tensor y1 = zeros({1}), y2 = zeros({1});
  const int line = __LINE__ + 1;
  debug::fail(ones({1}), y1, "first failure");
  debug::fail(ones({1}), y2, "second failure");
  std::string m = error_of([] { wait_all(); });
  EXPECT_TRUE(contains(m, "first failure"));
  EXPECT_TRUE(contains(m, site_of(line)));
  EXPECT_NO_THROW(wait_all());  // reported once
  // The tensors still carry their failures.
  EXPECT_TRUE(contains(error_of([&] { y2.item(); }), "second failure"));
  // And the engine works normally.
  EXPECT_EQ(add(ones({1}), 1.0).item(), 2.0f);
  EXPECT_NO_THROW(wait_all());
}

TEST_F(Errors, WaitAllSkipsFailuresAlreadyReportedBySyncs) {
  Tensor y = zeros({1});
  debug::fail(ones({1}), y, "seen");
  EXPECT_THROW(y.item(), Error);
  EXPECT_NO_THROW(wait_all());
}

TEST_F(Errors, WaitAllReportsInheritedFailuresThroughTheRoot) {
  // A skipped dependent is not a new failure: wait_all reports the root once.
  Tensor y = zeros({1});
  debug::fail(ones({1}), y, "root");
  Tensor z = add(y, 1.0);
  std::string m = error_of([] { wait_all(); });
  EXPECT_TRUE(contains(m, "[fail] root"));
  EXPECT_NO_THROW(wait_all());
  EXPECT_TRUE(contains(error_of([&] { z.item(); }), "root"));
}

// ---- memory limit --------------------------------------------------------------------

TEST_F(Errors, OutOfMemoryWithNothingInFlightThrowsAtTheCall) {
  Engine::get().synchronize();
  Allocator& alloc = Allocator::get();
  const size_t limit = alloc.stats().active_bytes + 4096;
  alloc.set_limit(limit);
  EXPECT_EQ(alloc.stats().limit_bytes, limit);
  const uint64_t queued = Engine::get().stats().queued;
  std::string m = error_of([] { ones({1 << 20}); });
  EXPECT_TRUE(contains(m, "[ones] out of memory"));
  EXPECT_TRUE(contains(m, std::to_string(4 << 20)));  // the requested bytes
  EXPECT_TRUE(contains(m, std::to_string(limit)));    // the limit
  EXPECT_EQ(Engine::get().stats().queued, queued);
  // Small allocations under the limit still work.
  EXPECT_EQ(ones({8}).to_vector(), std::vector<float>(8, 1.0f));
  alloc.set_limit(0);
  EXPECT_EQ(ones({1 << 20}).to_vector()[0], 1.0f);
}

TEST_F(Errors, WorkspaceOverTheLimitFailsTheOpNotTheCall) {
  // A full sum over more than 1M elements takes a workspace for its block partials while
  // it runs (fewer partials stay on the stack); with the limit
  // leaving room for the output but not the workspace, the op fails on the worker, its
  // output is poisoned, and the failure surfaces at the sync with the queue site.
  Tensor big = ones({1 << 21});  // 128 blocks of partials: a 1032-byte workspace
  Engine::get().synchronize();
  Allocator& alloc = Allocator::get();
  alloc.set_limit(alloc.stats().active_bytes + Allocator::round_size(4));
  Tensor s = sum(big);  // the output fits: no error at the call
  int line = __LINE__ - 1;
  std::string m = error_of([&] { s.item<float>(); });
  alloc.set_limit(0);
  EXPECT_TRUE(contains(m, "[sum]")) << m;
  EXPECT_TRUE(contains(m, "workspace")) << m;
  EXPECT_TRUE(contains(m, site_of(line))) << m;
  EXPECT_EQ(sum(big).item<float>(), float(1 << 21));  // the engine goes on
}

TEST_F(Errors, AllocationOverTheLimitWaitsForQueuedWork) {
  Allocator& alloc = Allocator::get();
  constexpr int64_t n = 1 << 18;  // 1 MiB of float32
  const size_t block = Allocator::round_size(size_t(n) * 4);
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  Gate gate;
  gate.hold(tag);
  {
    Tensor tmp = ones({n});
    Tensor tmp2 = add(tmp, 1.0);
  }  // the handles are gone: only the queued (held) work keeps the two blocks
  const AllocatorStats before = alloc.stats();
  const size_t limit = before.active_bytes + block / 2;
  alloc.set_limit(limit);  // one more block does not fit until the queued work ran
  std::thread opener([&] {
    // Open once the allocation below is waiting (or give up, and the test fails).
    wait_until([&] { return alloc.stats().pressure_stalls > before.pressure_stalls; });
    gate.open();
  });
  Tensor big = full({n}, 7.0);
  opener.join();
  const AllocatorStats after = alloc.stats();
  EXPECT_GT(after.pressure_stalls, before.pressure_stalls);
  EXPECT_GT(after.pressure_stall_ns, before.pressure_stall_ns);
  EXPECT_LE(after.active_bytes, limit);
  EXPECT_FALSE(gate.timed_out());
  std::vector<float> v = big.to_vector();
  EXPECT_EQ(v.front(), 7.0f);
  EXPECT_EQ(v.back(), 7.0f);
}

// Issue 11 item 11: a kernel that syncs on work queued after it on its own stream used to
// deadlock silently. The wait is refused: the kernel's op fails with a message that says
// why, and the stream goes on (the later op still runs).
TEST_F(Errors, AKernelWaitingForWorkQueuedAfterItOnItsStreamThrows) {
  Tensor y = zeros({1});
  Engine::get().synchronize();
  Gate gate;
  Tensor hold = zeros({1});
  gate.hold(hold);
  Tensor k = zeros({1});
  debug::gate(k, [y] { (void)y.item(); });  // runs after y.add_ below was queued
  y.add_(ones({1}));
  gate.open();
  const std::string m = error_of([&] { k.wait_to_read(); });
  EXPECT_TRUE(contains(m, "of its own stream, which runs after it")) << m;
  EXPECT_EQ(y.item(), 1.0f);
  // Engine::synchronize() inside a kernel waits for the kernel itself: refused the same way.
  Tensor k2 = zeros({1});
  debug::gate(k2, [] { Engine::get().synchronize(); });
  EXPECT_TRUE(contains(error_of([&] { k2.wait_to_read(); }), "it would wait for ever"));
  EXPECT_FALSE(gate.timed_out());
}

// Issue 11 item 13: a failure used to be permanent. copy_ onto a whole tensor from a sound
// one replaces it; in-place arithmetic (which reads the old values) keeps it; a copy_ into
// part of the storage keeps it; failed() answers without syncing on the whole queue.
TEST_F(Errors, CopyOntoAWholeFailedTensorReplacesTheFailure) {
  Tensor x = zeros({4});
  debug::fail(ones({1}), x, "poisoned");
  EXPECT_TRUE(x.failed());
  EXPECT_TRUE(contains(x.failure_message(), "poisoned"));
  x.mul_(0.0);  // reads the old (failed) values: still failed
  EXPECT_TRUE(x.failed());
  x.copy_(full({4}, 2.0));
  EXPECT_FALSE(x.failed());
  EXPECT_EQ(x.failure_message(), "");
  EXPECT_EQ(x.to_vector(), std::vector<float>(4, 2.0f));
  x.add_(ones({4}));  // later work on it runs again
  EXPECT_EQ(x.to_vector(), std::vector<float>(4, 3.0f));
  // A failed source replaces the failure with its own.
  Tensor bad = zeros({4});
  debug::fail(ones({1}), bad, "source failed");
  x.copy_(bad);
  EXPECT_TRUE(contains(error_of([&] { x.wait_to_read(); }), "source failed"));
  clear_pending_failures();
}

TEST_F(Errors, PartialWritesAndSelfCopiesKeepTheFailure) {
  Tensor x = zeros({4, 2});
  debug::fail(ones({1}), x, "poisoned");
  x.slice(0, 2).copy_(ones({2, 2}));  // half the storage: the other half is still spoiled
  EXPECT_TRUE(x.failed());
  x.copy_(x);  // reads itself: nothing sound to replace the values with
  EXPECT_TRUE(x.failed());
  clear_pending_failures();
}

TEST_F(Errors, FailedWaitsOnlyForTheTensorsOwnWrite) {
  Tensor x = zeros({2});
  debug::fail(ones({1}), x, "poisoned");
  Gate gate;
  Tensor other = zeros({1});
  {
    StreamGuard g(test_stream(0));
    gate.hold(other);  // unrelated work held on another stream
  }
  EXPECT_TRUE(x.failed());  // returns although the queue is not empty
  EXPECT_FALSE(other.is_ready());
  gate.open();
  clear_pending_failures();
}

}  // namespace
}  // namespace tide
