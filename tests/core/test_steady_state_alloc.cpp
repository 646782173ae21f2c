// The enqueue path allocates nothing per op in steady state: after a warm-up, queuing
// tiny ops (scalar, same-shape and broadcasting elementwise, matmul, a reduction) makes no
// call to the global operator new on the queuing thread. Counted by replacing operator new
// in this binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <latch>
#include <new>

#include "tide.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_news{0};
thread_local bool tl_frontend = false;  // count only the thread that queues the ops
}  // namespace

void* operator new(std::size_t n) {
  if (tl_frontend && g_counting.load(std::memory_order_relaxed)) g_news.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace tide {
namespace {

long count_news(const std::function<void()>& body) {
  g_news = 0;
  tl_frontend = true;
  g_counting = true;
  body();
  g_counting = false;
  tl_frontend = false;
  return g_news.load();
}

TEST(SteadyState, QueuingTinyOpsAllocatesNothing) {
  Tensor x = zeros({1, 2});
  Tensor row = ones({2});
  Tensor big = ones({64, 2});
  Tensor a = ones({8, 8}), b = ones({8, 8});
  auto step = [&] {
    x = x + 1.0;           // tensor-scalar
    x = x * x;             // same shape
    x = relu(x);           // unary
    Tensor y = big + row;  // broadcasting
    Tensor c = matmul(a, b);
    Tensor s = sum(y, 0);
  };
  // Warm up with the worker held, so the queue, the caches and the pools grow to a depth
  // the measured run cannot exceed: what remains is the per-op cost.
  std::latch open(1);
  Tensor held = zeros({1});
  debug::gate(held, [&] { open.wait(); });
  for (int i = 0; i < 2000; ++i) step();
  open.count_down();
  wait_all();
  long news = count_news([&] {
    for (int i = 0; i < 1000; ++i) step();
  });
  wait_all();
  EXPECT_EQ(news, 0) << "operator new calls while queuing 6000 ops";
  EXPECT_GT(x.to_vector<float>()[0], 0.0f);
}

TEST(SteadyState, CounterSeesAllocations) {
  // The counter works: a vector of ten ints is one allocation.
  long news = count_news([] {
    std::vector<int> v(10);
    (void)v;
  });
  EXPECT_EQ(news, 1);
}

}  // namespace
}  // namespace tide
