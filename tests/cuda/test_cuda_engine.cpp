// The engine's semantics re-run on real CUDA streams (cuda:0): queued ops return before
// they run, cross-stream hazards order work through events, a failing op fails only what
// depends on it, backpressure, four frontend threads, shutdown with queued work, memory
// stats and out-of-memory messages, host reads, synchronous mode. The fake-GPU versions
// (tests/core/test_fake_gpu.cpp) check the same logic on every machine.
#include <gtest/gtest.h>

#include <thread>

#include "core/cuda/runtime.h"
#include "tests/core/test_support.h"

namespace tide {
namespace {

using namespace testing_support;

Device gpu() { return Device::cuda(0); }

Stream gpu_stream(int i) {
  static std::vector<Stream>* v = [] {
    auto* s = new std::vector<Stream>;
    for (int k = 0; k < 3; ++k) s->push_back(Stream::create(gpu()));
    return s;
  }();
  return v->at(size_t(i));
}

class CudaEngine : public EngineTest {};

TEST_F(CudaEngine, QueuedOpsReturnBeforeTheyRun) {
  Tensor x = ones({1000}, DType::float32, gpu());
  Gate gate;
  gate.hold(x);  // holds the GPU stream's launcher
  Tensor y = x + 1.0;
  EXPECT_FALSE(becomes_ready_within(y));
  gate.open();
  EXPECT_FLOAT_EQ(sum(y).item<float>(), 2000.0f);
}

TEST_F(CudaEngine, CrossStreamHazardsOrderWork) {
  Generator gen(3);
  Tensor a = randn({512, 512}, DType::float32, gen, gpu());
  a.wait_to_read();
  Tensor y;
  {
    StreamGuard g(gpu_stream(0));
    y = a;
    for (int i = 0; i < 40; ++i) y = tanh(matmul(y, a));  // long enough to overlap
  }
  Tensor z;
  {
    StreamGuard g(gpu_stream(1));
    z = y * 2.0;  // read-after-write across streams
  }
  std::vector<float> yv = y.to_vector<float>(), zv = z.to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_FLOAT_EQ(zv[i], 2 * yv[i]) << i;
}

TEST_F(CudaEngine, AFailingOpFailsOnlyWhatDependsOnIt) {
  Tensor x = ones({4}, DType::float32, gpu());
  Tensor y = zeros({4}, DType::float32, gpu());
  debug::fail(x, y, "injected");
  Tensor z = y + 1.0;
  Tensor w = x + 1.0;
  EXPECT_TRUE(contains(error_of([&] { z.wait_to_read(); }), "injected"));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  clear_pending_failures();
}

TEST_F(CudaEngine, BackpressureBoundsQueuedWork) {
  Tensor x = ones({16}, DType::float32, gpu());
  Engine::get().set_max_inflight_ops(4);
  Gate gate;
  gate.hold(x);
  Flag done;
  std::thread t([&] {
    Tensor y = x;
    for (int i = 0; i < 10; ++i) y = y + 1.0;
    done.set();
  });
  EXPECT_FALSE(done.wait_for(200ms));
  gate.open();
  EXPECT_TRUE(done.wait_for());
  t.join();
  Engine::get().set_max_inflight_ops(0);
}

TEST_F(CudaEngine, FourFrontendThreads) {
  Tensor x = ones({256}, DType::float32, gpu());
  std::vector<float> r(4);
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([&, k] {
      StreamGuard g(gpu_stream(k % 3));
      Tensor y = x;
      for (int i = 0; i < 300; ++i) y = y + 1.0;
      r[size_t(k)] = sum(y).item<float>();
    });
  for (auto& t : ts) t.join();
  for (float v : r) EXPECT_FLOAT_EQ(v, 256 * 301.0f);
}

TEST_F(CudaEngine, ShutdownCancelsQueuedWorkAndRestarts) {
  Tensor x = ones({8}, DType::float32, gpu());
  x.wait_to_read();
  Gate gate;
  gate.hold(x);
  // The gate must be running, not queued: a queued gate is cancelled too and fails x (seen
  // once under ctest -j 4 on an H200).
  ASSERT_TRUE(gate.wait_entered());
  Tensor y = x + 1.0;
  std::thread opener([&] {
    std::this_thread::sleep_for(100ms);
    gate.open();
  });
  Engine::get().shutdown(ShutdownMode::cancel);
  opener.join();
  EXPECT_TRUE(contains(error_of([&] { y.wait_to_read(); }), "cancelled"));
  clear_pending_failures();
  EXPECT_EQ((x * 3.0).to_vector<float>()[0], 3.0f) << "the engine restarts";
}

TEST_F(CudaEngine, MemoryStatsAndOutOfMemory) {
  Allocator& al = Allocator::get(gpu());
  size_t before = al.stats().active_bytes;
  {
    Tensor t = zeros({1 << 20}, DType::float32, gpu());
    EXPECT_GE(al.stats().active_bytes, before + (size_t(4) << 20));
  }
  Engine::get().synchronize();
  EXPECT_EQ(al.stats().active_bytes, before);
  std::string e = error_of([] { (void)zeros({int64_t(1) << 40}, DType::float32, gpu()); });
  EXPECT_TRUE(contains(e, "out of memory on cuda:0"));
  EXPECT_TRUE(contains(e, "bytes free of"));
}

// A CUDA call that failed and threw (a graph build that then falls back) must
// not leave its error behind for the next op's launch check to blame on that op.
TEST_F(CudaEngine, ARefusedGraphCallLeavesNoErrorForTheNextOp) {
  cuda::DeviceApi& api = cuda::DeviceRuntime::get(0).api();
  std::string e = error_of([&] {
    (void)api.graph_add_memcpy(nullptr, {}, nullptr, nullptr, 16, cuda::CopyKind::device_to_device);
  });
  EXPECT_TRUE(contains(e, "cudaGraphAddMemcpyNode1D failed")) << e;
  cuda::Status left = api.last_error();
  EXPECT_FALSE(left.failed()) << left.message;
  Tensor x = ones({4}, DType::float32, gpu());
  EXPECT_EQ((x + 1.0).to_vector<float>()[0], 2.0f) << "the next op is not blamed";
}

TEST_F(CudaEngine, SynchronousModeRunsEachOpToCompletion) {
  Tensor x = ones({4}, DType::float32, gpu());
  x.wait_to_read();
  SynchronousGuard sync;
  Tensor y = x + 1.0;
  EXPECT_TRUE(y.is_ready());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(CudaEngine, QueueDrainsToZero) {
  Tensor x = randn({1000}, DType::float32, default_generator(), gpu());
  for (int i = 0; i < 100; ++i) x = x * 1.0001;
  Engine::get().wait_all();
  EngineStats s = Engine::get().stats();
  EXPECT_EQ(s.queue_depth, 0u);
}

}  // namespace
}  // namespace tide
