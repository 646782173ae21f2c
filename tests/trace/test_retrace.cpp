// Signatures, retrace reasons, the retrace warning, cache eviction, host reads and
// failures while tracing.
#include <gtest/gtest.h>

#include <sstream>

#include "core/engine/engine.h"
#include "core/error.h"
#include "error_of.h"
#include "ops/ops.h"
#include "trace/trace.h"

namespace tide {
namespace {

using test_util::error_of;

TEST(TraceRetrace, SameSignatureNeverRetraces) {
  auto f = trace::function([](const Tensor& x) { return x * 2.0; });
  for (int i = 0; i < 10; ++i) f(randn({3, 4}));
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().replays, 10);
}

TEST(TraceRetrace, ReasonsNameArgumentPropertyAndValues) {
  auto f = trace::function([](const Tensor& x, int k) { return x + double(k); });
  f(zeros({2, 3}), 1);
  f(zeros({4, 3}), 1);                  // shape
  f(zeros({4, 3}, DType::float64), 1);  // dtype
  f(zeros({4, 3}, DType::float64), 2);  // value
  auto r = f.stats().retraces;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].argument, 0);
  EXPECT_EQ(r[0].property, "shape");
  EXPECT_EQ(r[0].before, "(2, 3)");
  EXPECT_EQ(r[0].after, "(4, 3)");
  EXPECT_EQ(r[1].property, "dtype");
  EXPECT_EQ(r[1].before, "float32");
  EXPECT_EQ(r[1].after, "float64");
  EXPECT_EQ(r[2].argument, 1);
  EXPECT_EQ(r[2].property, "value");
  EXPECT_EQ(r[2].str(), "argument 1: value 1 -> 2");
  EXPECT_EQ(f.stats().traces, 4);
}

TEST(TraceRetrace, WarnsAfterFiveRetracesInTenCalls) {
  auto f =
      trace::function([](const Tensor& x, int k) { return x + double(k); }, {.name = "shifty"});
  ::testing::internal::CaptureStderr();
  for (int k = 0; k < 5; ++k) f(zeros({2}), k);
  EXPECT_FALSE(f.stats().warned);  // 4 retraces so far
  f(zeros({2}), 5);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(f.stats().warned);
  EXPECT_NE(err.find("'shifty'"), std::string::npos) << err;
  EXPECT_NE(err.find("argument 1: value 4 -> 5"), std::string::npos) << err;
}

TEST(TraceRetrace, CacheEvictsTheLeastRecentlyUsed) {
  auto f = trace::function([](const Tensor& x) { return x + 1.0; }, {.cache_budget = 2});
  f(zeros({1}));
  f(zeros({2}));
  f(zeros({1}));  // hit: {1} is now the most recent
  f(zeros({3}));  // evicts {2}
  EXPECT_EQ(f.stats().evictions, 1);
  EXPECT_EQ(f.stats().cached, 2u);
  EXPECT_NE(f.graph(zeros({1})), nullptr);
  EXPECT_EQ(f.graph(zeros({2})), nullptr);
  f(zeros({2}));  // traced again
  EXPECT_EQ(f.stats().traces, 4);
  f.clear();
  EXPECT_EQ(f.stats().cached, 0u);
}

TEST(TraceRetrace, HostReadsInsideATraceThrow) {
  auto item = trace::function([](const Tensor& x) { return x * x.item<double>(); });
  std::string e = error_of([&] { item(ones({1})); });
  EXPECT_NE(e.find("[item]"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot read a tensor on the host"), std::string::npos) << e;
  auto vec = trace::function([](const Tensor& x) {
    (void)x.to_vector<float>();
    return x;
  });
  EXPECT_NE(error_of([&] { vec(ones({1})); }).find("[to_vector]"), std::string::npos);
  auto sync = trace::function([](const Tensor& x) {
    wait_all();
    return x;
  });
  EXPECT_NE(error_of([&] { sync(ones({1})); }).find("[wait_all]"), std::string::npos);
  auto print = trace::function([](const Tensor& x) {
    std::ostringstream os;
    os << x;
    return x;
  });
  EXPECT_NE(error_of([&] { print(ones({1})); }).find("[print]"), std::string::npos);
}

TEST(TraceRetrace, AFailedTraceLeavesNoCacheEntry) {
  bool fail = true;
  auto f = trace::function([&](const Tensor& x) {
    Tensor y = x + 1.0;
    if (fail) throw Error("user", "midway");
    return y;
  });
  EXPECT_NE(error_of([&] { f(ones({2})); }).find("midway"), std::string::npos);
  EXPECT_EQ(f.stats().cached, 0u);
  EXPECT_EQ(f.stats().traces, 0);
  fail = false;
  EXPECT_EQ(f(ones({2})).to_vector<double>(), std::vector<double>(2, 2.0));
  // Nothing was queued by the failed trace.
  wait_all();
}

TEST(TraceRetrace, ErrorsInsideAReplaySurfaceAtSyncNamingTheNode) {
  auto f = trace::function([](const Tensor& x) {
    Tensor y = x + 1.0;
    Tensor z = zeros({2});
    debug::fail(y, z, "broken kernel");
    return z * 2.0;
  });
  Tensor out = f(ones({2}));  // does not throw: queued
  std::string e = error_of([&] { out.wait_to_read(); });
  EXPECT_NE(e.find("broken kernel"), std::string::npos) << e;
  EXPECT_NE(e.find("(fail, traced at"), std::string::npos) << e;
  // The engine and the function stay usable; the next call fails again, cleanly.
  Tensor again = f(ones({2}));
  EXPECT_NE(error_of([&] { again.wait_to_read(); }).find("broken kernel"), std::string::npos);
  try {
    wait_all();
  } catch (const Error&) {
  }
  EXPECT_EQ((ones({2}) + 1.0).to_vector<double>(), std::vector<double>(2, 2.0));
}

TEST(TraceRetrace, NestedCallsRunInline) {
  auto inner = trace::function([](const Tensor& x) { return x * 3.0; });
  auto outer = trace::function([&](const Tensor& x) { return inner(x) + 1.0; });
  EXPECT_EQ(outer(ones({2})).to_vector<double>(), std::vector<double>(2, 4.0));
  EXPECT_EQ(inner.stats().traces, 0);
  EXPECT_EQ(outer.stats().recorded_ops, 2);
}

}  // namespace
}  // namespace tide
