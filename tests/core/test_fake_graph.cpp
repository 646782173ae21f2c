// The device layer's CUDA Graph calls on the recording fake (core/cuda/fake_graph.cpp),
// which the GPU trace executor's CPU tests stand on: captured nodes keep what their launch
// queued and nothing runs until the exec is launched; edges are exactly the deps given;
// copy nodes can be re-pointed per launch; an update keeps an exec when the topology is
// the same and refuses otherwise; a capture can be refused; allocating while capturing
// fails as cudaMalloc does in thread-local capture mode. And the loop rule
// (core/loop_count.h) that the fake's and the device's loop kernels share.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/cuda/fake_device.h"
#include "core/cuda/runtime.h"
#include "core/loop_count.h"
#include "tests/error_of.h"

namespace tide {
namespace {

using cuda::CopyKind;
using cuda::FakeDevice;
using cuda::GraphNodeHandle;
using cuda::StreamHandle;

// Queues `fn` on s as a host function, as an op's kernel does on the fake. It lives as
// long as the process: a captured host function runs on every launch of its graph (as
// cudaLaunchHostFunc's does), so it must outlive the graph.
void host_on(FakeDevice& dev, StreamHandle s, std::function<void()> fn) {
  static std::vector<std::unique_ptr<std::function<void()>>> kept;
  kept.push_back(std::make_unique<std::function<void()>>(std::move(fn)));
  dev.launch_host(
      s, [](void* f) { (*static_cast<std::function<void()>*>(f))(); }, kept.back().get());
}

// Queues "*p += v" on s.
void add_on(FakeDevice& dev, StreamHandle s, int* p, int v) {
  host_on(dev, s, [p, v] { *p += v; });
}

// Queues "order->push_back(id)" on s.
void push_on(FakeDevice& dev, StreamHandle s, std::vector<int>* order, int id) {
  host_on(dev, s, [order, id] { order->push_back(id); });
}

TEST(FakeGraph, CapturedWorkRunsOnlyWhenLaunchedInDependencyOrder) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  int x = 0, y = 0;
  auto g = dev.graph_create();
  std::string why;
  GraphNodeHandle a = dev.graph_add_captured(
      g, {},
      [&](StreamHandle cs) {
        add_on(dev, cs, &x, 1);
        add_on(dev, cs, &x, 10);
      },
      &why);
  ASSERT_NE(a, nullptr) << why;
  GraphNodeHandle b = dev.graph_add_captured(
      g, {&a, 1}, [&](StreamHandle cs) { add_on(dev, cs, &y, 100); }, &why);
  ASSERT_NE(b, nullptr) << why;
  EXPECT_EQ(x, 0) << "capturing runs nothing";
  FakeDevice::GraphShape shape = dev.graph_shape(g);
  EXPECT_EQ(shape.kinds, "kk");
  EXPECT_EQ(shape.ops, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(shape.edges, (std::vector<std::pair<int, int>>{{0, 1}}));
  EXPECT_EQ(dev.graph_node_count(g), 2u);

  auto exec = dev.graph_instantiate(g, &why);
  ASSERT_NE(exec, nullptr) << why;
  dev.graph_destroy(g);  // the exec stands alone
  dev.graph_launch(exec, s);
  dev.graph_launch(exec, s);
  ASSERT_FALSE(dev.synchronize(s).failed());
  EXPECT_EQ(x, 22);
  EXPECT_EQ(y, 200);
  EXPECT_EQ(dev.count(FakeDevice::CallKind::graph_launch, s), 2u);
  dev.graph_exec_destroy(exec);
}

// CUDA promises no order between nodes without an edge; the fake runs the latest-added
// ready node first, so code that leans on insertion order instead of an edge fails its
// tests here.
TEST(FakeGraph, NodesWithoutAnEdgeRunLatestAddedFirstAnEdgeOrdersThem) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  std::vector<int> order;
  // A captured node whose launch queues "order.push_back(id)".
  auto node = [&](cuda::GraphHandle g, std::span<const GraphNodeHandle> deps, int id) {
    std::string why;
    GraphNodeHandle n = dev.graph_add_captured(
        g, deps, [&](StreamHandle cs) { push_on(dev, cs, &order, id); }, &why);
    EXPECT_NE(n, nullptr) << why;
    return n;
  };
  auto run = [&](cuda::GraphHandle g) {
    std::string why;
    auto exec = dev.graph_instantiate(g, &why);
    EXPECT_NE(exec, nullptr) << why;
    order.clear();
    dev.graph_launch(exec, s);
    EXPECT_FALSE(dev.synchronize(s).failed());
    dev.graph_exec_destroy(exec);
    dev.graph_destroy(g);
    return order;
  };

  auto free = dev.graph_create();
  node(free, {}, 0);
  node(free, {}, 1);
  node(free, {}, 2);
  EXPECT_EQ(run(free), (std::vector<int>{2, 1, 0}));

  // 0 -> 2 and 1 free: 1 and 0 are ready first (1 added later runs first), then 2.
  auto edged = dev.graph_create();
  GraphNodeHandle first = node(edged, {}, 0);
  node(edged, {}, 1);
  node(edged, {&first, 1}, 2);
  EXPECT_EQ(run(edged), (std::vector<int>{1, 0, 2}));

  // An edge added later (graph_add_dependencies) orders them as well.
  auto later = dev.graph_create();
  GraphNodeHandle a = node(later, {}, 0);
  GraphNodeHandle b = node(later, {}, 1);
  dev.graph_add_dependencies(later, {&a, 1}, b);
  EXPECT_EQ(run(later), (std::vector<int>{0, 1}));
}

TEST(FakeGraph, CopyNodesArePointedAtNewMemoryPerLaunch) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  int in1 = 5, in2 = 7, slot = 0, out = 0;
  auto g = dev.graph_create();
  GraphNodeHandle copy_in =
      dev.graph_add_memcpy(g, {}, &slot, &in1, sizeof(int), CopyKind::device_to_device);
  GraphNodeHandle twice = dev.graph_add_captured(
      g, {&copy_in, 1},
      [&](StreamHandle cs) {
        add_on(dev, cs, &slot, 0);  // a stand-in kernel on the slot
      },
      nullptr);
  dev.graph_add_memcpy(g, {&twice, 1}, &out, &slot, sizeof(int), CopyKind::device_to_device);
  EXPECT_EQ(dev.graph_shape(g).kinds, "mkm");
  auto exec = dev.graph_instantiate(g, nullptr);
  dev.graph_launch(exec, s);
  ASSERT_FALSE(dev.synchronize(s).failed());
  EXPECT_EQ(out, 5);
  dev.graph_exec_set_memcpy(exec, copy_in, &slot, &in2, sizeof(int), CopyKind::device_to_device);
  dev.graph_launch(exec, s);
  ASSERT_FALSE(dev.synchronize(s).failed());
  EXPECT_EQ(out, 7) << "the next launch copies from the new source";
  dev.graph_exec_destroy(exec);
  dev.graph_destroy(g);
}

TEST(FakeGraph, UpdateKeepsAnExecOfTheSameTopologyOnly) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  int x = 0;
  auto build = [&](int v, bool extra) {
    auto g = dev.graph_create();
    GraphNodeHandle n = dev.graph_add_captured(
        g, {}, [&](StreamHandle cs) { add_on(dev, cs, &x, v); }, nullptr);
    if (extra)
      dev.graph_add_captured(
          g, {&n, 1}, [&](StreamHandle cs) { add_on(dev, cs, &x, v); }, nullptr);
    return g;
  };
  auto g1 = build(1, false);
  auto exec = dev.graph_instantiate(g1, nullptr);
  auto g2 = build(3, false);
  EXPECT_TRUE(dev.graph_exec_update(exec, g2));
  dev.graph_launch(exec, s);
  ASSERT_FALSE(dev.synchronize(s).failed());
  EXPECT_EQ(x, 3) << "the updated exec runs the new graph's work";
  auto g3 = build(5, true);
  EXPECT_FALSE(dev.graph_exec_update(exec, g3)) << "another topology: re-instantiate";
  for (auto g : {g1, g2, g3}) dev.graph_destroy(g);
  dev.graph_exec_destroy(exec);
}

// As on the device (core/cuda/dependent_launch.h): only kernel nodes, captured work and
// the loop kernels, are joined by programmatic edges, and only to the kernel nodes among
// their deps; copy and WHILE nodes have ordinary edges both ways.
TEST(FakeGraph, ProgrammaticEdgesJoinKernelNodesOnly) {
  const bool was = cuda::programmatic_edges_enabled();
  cuda::set_programmatic_edges_enabled(true);
  FakeDevice dev;
  int x = 0, y = 0;
  auto kernel = [&](cuda::GraphHandle g, std::span<const GraphNodeHandle> deps) {
    return dev.graph_add_captured(
        g, deps, [&](StreamHandle cs) { add_on(dev, cs, &x, 1); }, nullptr);
  };
  auto refused = [&](cuda::GraphHandle g) {
    dev.refuse_programmatic_graphs(true);
    auto exec = dev.graph_instantiate(g, nullptr);
    dev.refuse_programmatic_graphs(false);
    if (exec) dev.graph_exec_destroy(exec);
    return exec == nullptr;
  };

  // kernel -> copy -> kernel: no kernel node is joined to a kernel node.
  uint64_t before = cuda::programmatic_edges_added();
  auto plain = dev.graph_create();
  GraphNodeHandle k0 = kernel(plain, {});
  GraphNodeHandle m1 =
      dev.graph_add_memcpy(plain, {&k0, 1}, &y, &x, sizeof(int), CopyKind::device_to_device);
  GraphNodeHandle k2 = kernel(plain, {&m1, 1});
  EXPECT_EQ(cuda::programmatic_edges_added(), before);
  EXPECT_FALSE(refused(plain));

  // Then a kernel after {k0, m1} (one programmatic edge, from k0), a loop's start kernel
  // after it (one more), a WHILE node after that (none) and a step kernel after a kernel in
  // its body (one more).
  GraphNodeHandle deps[] = {k0, m1};
  GraphNodeHandle k3 = kernel(plain, deps);
  EXPECT_EQ(cuda::programmatic_edges_added(), before + 1);
  int64_t counter = 0;
  cuda::ConditionalHandle cond = 0;
  ASSERT_TRUE(dev.graph_create_condition(plain, &cond, nullptr));
  GraphNodeHandle s4 = dev.graph_add_loop_start(plain, {&k3, 1}, {.main = cond, .unroll = 1},
                                                &counter, {.fixed = 2}, {}, nullptr);
  EXPECT_EQ(cuda::programmatic_edges_added(), before + 2);
  cuda::GraphHandle body = nullptr;
  dev.graph_add_while(plain, {&s4, 1}, cond, &body, nullptr);
  EXPECT_EQ(cuda::programmatic_edges_added(), before + 2);
  GraphNodeHandle b0 = kernel(body, {});
  dev.graph_add_loop_step(body, {&b0, 1}, cond, 1, &counter, 1, {}, nullptr);
  EXPECT_EQ(cuda::programmatic_edges_added(), before + 3);
  EXPECT_TRUE(refused(plain));
  (void)k2;

  cuda::set_programmatic_edges_enabled(false);
  auto ordinary = dev.graph_create();
  GraphNodeHandle a = kernel(ordinary, {});
  kernel(ordinary, {&a, 1});
  EXPECT_EQ(cuda::programmatic_edges_added(), before + 3) << "not wanted: none";
  EXPECT_FALSE(refused(ordinary));
  cuda::set_programmatic_edges_enabled(was);
  dev.graph_destroy(plain);
  dev.graph_destroy(ordinary);
}

TEST(FakeGraph, RefusedCapturesAndAllocationsWhileCapturing) {
  FakeDevice dev;
  auto g = dev.graph_create();
  int x = 0;
  dev.refuse_next_capture("a launch that cannot be captured");
  std::string why;
  EXPECT_EQ(dev.graph_add_captured(
                g, {}, [&](StreamHandle cs) { add_on(dev, cs, &x, 1); }, &why),
            nullptr);
  EXPECT_NE(why.find("cannot be captured"), std::string::npos) << why;
  EXPECT_NE(dev.graph_add_captured(
                g, {}, [&](StreamHandle cs) { add_on(dev, cs, &x, 1); }, &why),
            nullptr)
      << "the next capture works again";
  std::string e = test_util::error_of([&] {
    dev.graph_add_captured(
        g, {}, [&](StreamHandle) { (void)dev.malloc(64); }, nullptr);
  });
  EXPECT_NE(e.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << e;
  void* p = dev.malloc(64);
  EXPECT_NE(p, nullptr) << "allocating works again after the capture";
  dev.free(p);
  EXPECT_EQ(dev.graph_node_count(g), 1u);
  dev.graph_destroy(g);
}

// What CUDA refuses in thread-local capture mode besides an allocation: a synchronisation
// and a library handle's creation (cublasLtCreate, cudnnCreate allocate). The call fails,
// and a launch that goes on past the failure still loses its capture (invalidated), as
// CUDA's capture does; outside a capture both calls work.
TEST(FakeGraph, SynchronisingOrCreatingAHandleWhileCapturingInvalidatesTheCapture) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  auto g = dev.graph_create();
  int x = 0;
  std::string why;
  cuda::Status inside;
  EXPECT_EQ(dev.graph_add_captured(
                g, {},
                [&](StreamHandle cs) {
                  add_on(dev, cs, &x, 1);
                  inside = dev.synchronize(s);
                },
                &why),
            nullptr);
  EXPECT_TRUE(inside.failed());
  EXPECT_NE(why.find("cudaErrorStreamCaptureInvalidated"), std::string::npos) << why;
  EXPECT_NE(why.find("cudaStreamSynchronize"), std::string::npos) << why;
  std::string e = test_util::error_of([&] {
    dev.graph_add_captured(
        g, {}, [&](StreamHandle) { (void)dev.create_blas(); }, nullptr);
  });
  EXPECT_NE(e.find("cublasLtCreate failed"), std::string::npos) << e;
  EXPECT_EQ(dev.graph_node_count(g), 0u);
  EXPECT_NE(dev.graph_add_captured(
                g, {}, [&](StreamHandle cs) { add_on(dev, cs, &x, 1); }, &why),
            nullptr)
      << "the next capture works again: " << why;
  (void)dev.create_blas();
  EXPECT_FALSE(dev.synchronize(s).failed());
  EXPECT_EQ(dev.count(FakeDevice::CallKind::create_blas), 2u);
  EXPECT_EQ(x, 0) << "nothing captured ran";
  dev.graph_destroy(g);
}

// Independent nodes run in the order set_node_order chooses; a node that waits for both
// runs after them in every order.
TEST(FakeGraph, IndependentNodesRunInTheChosenOrder) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  std::vector<int> order;
  auto g = dev.graph_create();
  std::string why;
  GraphNodeHandle a = dev.graph_add_captured(
      g, {}, [&](StreamHandle cs) { push_on(dev, cs, &order, 0); }, &why);
  GraphNodeHandle b = dev.graph_add_captured(
      g, {}, [&](StreamHandle cs) { push_on(dev, cs, &order, 1); }, &why);
  GraphNodeHandle ab[] = {a, b};
  ASSERT_NE(dev.graph_add_captured(
                g, ab, [&](StreamHandle cs) { push_on(dev, cs, &order, 2); }, &why),
            nullptr);
  auto exec = dev.graph_instantiate(g, &why);
  ASSERT_NE(exec, nullptr) << why;
  auto launch = [&] {
    order.clear();
    dev.graph_launch(exec, s);
    EXPECT_FALSE(dev.synchronize(s).failed());
    return order;
  };
  EXPECT_EQ(launch(), (std::vector<int>{1, 0, 2})) << "latest first, the default";
  dev.set_node_order(FakeDevice::NodeOrder::earliest_first);
  EXPECT_EQ(launch(), (std::vector<int>{0, 1, 2}));
  dev.set_node_order(FakeDevice::NodeOrder::shuffled, 7);
  std::set<std::vector<int>> shuffled;
  for (int i = 0; i < 20; ++i) shuffled.insert(launch());  // a new order each launch
  EXPECT_EQ(shuffled, (std::set<std::vector<int>>{{0, 1, 2}, {1, 0, 2}}))
      << "both orders over 20 launches, the join always last";
  dev.graph_exec_destroy(exec);
  dev.graph_destroy(g);
}

TEST(FakeGraph, ConcurrentOrderRunsIndependentNodesAtOnce) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  std::atomic<int> started{0};
  std::atomic<int> saw_the_other{0};
  std::atomic<int> after{0};
  auto g = dev.graph_create();
  auto meet = [&](StreamHandle cs) {
    host_on(dev, cs, [&] {
      ++started;
      for (int i = 0; i < 5000 && started.load() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (started.load() >= 2) ++saw_the_other;
    });
  };
  std::string why;
  GraphNodeHandle a = dev.graph_add_captured(g, {}, meet, &why);
  GraphNodeHandle b = dev.graph_add_captured(g, {}, meet, &why);
  GraphNodeHandle ab[] = {a, b};
  ASSERT_NE(
      dev.graph_add_captured(
          g, ab, [&](StreamHandle cs) { host_on(dev, cs, [&] { after = started.load(); }); }, &why),
      nullptr);
  auto exec = dev.graph_instantiate(g, &why);
  ASSERT_NE(exec, nullptr) << why;
  dev.set_node_order(FakeDevice::NodeOrder::concurrent);
  dev.graph_launch(exec, s);
  EXPECT_FALSE(dev.synchronize(s).failed());
  EXPECT_EQ(saw_the_other.load(), 2) << "each independent node ran while the other did";
  EXPECT_EQ(after.load(), 2) << "the node after both ran after both";
  dev.graph_exec_destroy(exec);
  dev.graph_destroy(g);
}

// Why the orders matter: a reader captured without an edge to the writer it needs reads
// the value before the write in one of the orders.
TEST(FakeGraph, AMissingEdgeShowsInSomeOrder) {
  FakeDevice dev;
  StreamHandle s = dev.create_stream();
  int x = 0, y = 0;
  auto g = dev.graph_create();
  std::string why;
  (void)dev.graph_add_captured(
      g, {}, [&](StreamHandle cs) { host_on(dev, cs, [&] { x = 5; }); }, &why);
  (void)dev.graph_add_captured(  // no edge to the writer: a bug the orders must expose
      g, {}, [&](StreamHandle cs) { host_on(dev, cs, [&] { y = x + 1; }); }, &why);
  auto exec = dev.graph_instantiate(g, &why);
  ASSERT_NE(exec, nullptr) << why;
  std::set<int> seen;
  for (auto how : {FakeDevice::NodeOrder::latest_first, FakeDevice::NodeOrder::earliest_first}) {
    x = y = 0;
    dev.set_node_order(how);
    dev.graph_launch(exec, s);
    EXPECT_FALSE(dev.synchronize(s).failed());
    seen.insert(y);
  }
  EXPECT_EQ(seen, (std::set<int>{1, 6}));
  dev.graph_exec_destroy(exec);
  dev.graph_destroy(g);
  dev.set_node_order(FakeDevice::NodeOrder::latest_first);
}

// The count as every loop reads it: each dtype, floats truncated toward zero.
TEST(LoopRule, ReadsTheCountOfEachDtype) {
  const float f[] = {2.9f, -1.5f};
  const double d[] = {7.99, 0.5};
  const int32_t i = -3;
  const int64_t l = int64_t(1) << 40;
  EXPECT_EQ(read_loop_count(&f[0], DType::float32), 2);
  EXPECT_EQ(read_loop_count(&f[1], DType::float32), -1);
  EXPECT_EQ(read_loop_count(&d[0], DType::float64), 7);
  EXPECT_EQ(read_loop_count(&d[1], DType::float64), 0);
  EXPECT_EQ(read_loop_count(&i, DType::int32), -3);
  EXPECT_EQ(read_loop_count(&l, DType::int64), int64_t(1) << 40);
  // No number, or none int64 holds: invalid (a negative count), wherever it is read.
  const float invalid_f[] = {NAN, INFINITY, -INFINITY, 1e30f, 9.3e18f};
  for (float v : invalid_f) EXPECT_EQ(read_loop_count(&v, DType::float32), kInvalidLoopCount) << v;
  const double invalid_d[] = {NAN, 9223372036854775808.0, -1e300};
  for (double v : invalid_d) EXPECT_EQ(read_loop_count(&v, DType::float64), kInvalidLoopCount) << v;
  const double largest = 9223372036854774784.0;  // the largest double below 2^63
  EXPECT_EQ(read_loop_count(&largest, DType::float64), int64_t(9223372036854774784));
}

// The control flow of an unrolled loop as the device runs it (core/cuda/graph_loop.cu):
// the start sets both conditions from the count; each launch of the main body runs
// `unroll` iterations, each ending with a step that moves the counter and sets main's
// condition; then the remainder's body, one iteration and one step per launch. Every
// count runs exactly max(count, 0) iterations, each whole body launch `unroll` of them.
TEST(LoopRule, AnUnrolledLoopRunsTheCountExactly) {
  for (int64_t unroll = 1; unroll <= 5; ++unroll) {
    for (int64_t count = -2; count <= 13; ++count) {
      int64_t counter = count, iterations = 0, main_launches = 0;
      bool main = loop_unrolled_body_runs(counter, unroll);
      bool rest = unroll > 1 && loop_remainder_runs(counter, unroll);
      while (main) {
        ++main_launches;
        for (int64_t k = 0; k < unroll; ++k, ++iterations)
          main = loop_unrolled_body_runs(--counter, unroll);
      }
      if (unroll == 1) rest = false;  // no second WHILE node
      while (rest) {
        ++iterations;
        rest = loop_unrolled_body_runs(--counter, 1);
      }
      EXPECT_EQ(iterations, std::max<int64_t>(count, 0))
          << "count " << count << ", unroll " << unroll;
      EXPECT_EQ(main_launches, std::max<int64_t>(count, 0) / unroll) << "count " << count;
    }
  }
}

}  // namespace
}  // namespace tide
