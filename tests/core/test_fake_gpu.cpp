// The CUDA backend's logic on a recording fake of a GPU (core/cuda/fake_device.h), so it
// runs on every machine: completion read from the device's timeline (not "launched"), one
// event record and one wait per cross-stream hazard and none without one, stream-tagged
// block reuse, errors that fail the right window of ops, out-of-memory messages, pinned
// staging for host reads, and the engine's semantics (backpressure, several frontends,
// shutdown) on a GPU stream. The fake runs the ops' CPU kernels as host functions in
// stream order, on threads of its own, so work really is asynchronous.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/cuda/cuda_stream.h"
#include "core/engine/engine_impl.h"
#include "fake_gpu.h"
#include "tests/core/test_support.h"

namespace tide {
namespace {

using namespace testing_support;
using cuda::FakeDevice;
using Call = FakeDevice::CallKind;
using test_util::fake_gpu;

constexpr int kGpu = 8;          // the shared fake
constexpr int kSmallGpu = 9;     // 1 MiB of memory
constexpr int kDeadGpu = 15;     // killed by the sticky-error test
constexpr int kFaultedGpu = 14;  // killed by the fault-found-at-a-launch test

Device gpu() { return Device::cuda(kGpu); }
cuda::StreamHandle handle_of(const Stream& s) {
  return static_cast<cuda::CudaStream&>(*s.impl()->dev).handle();
}
// Blocks until the stream's worker has launched everything queued on it.
bool launched_all(const Stream& s) {
  return wait_until([&] { return s.impl()->issued.load() >= s.queued(); });
}
// Streams on the fake, created once (the engine keeps streams for its lifetime).
Stream gpu_stream(int i) {
  static std::vector<Stream>* v = [] {
    fake_gpu(kGpu);
    auto* s = new std::vector<Stream>;
    for (int k = 0; k < 3; ++k) s->push_back(Stream::create(gpu()));
    return s;
  }();
  return v->at(size_t(i));
}

class FakeGpu : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    fake_gpu(kGpu);
  }
  void TearDown() override {
    for (int i = 0; i < 3; ++i) fake_gpu(kGpu).resume(handle_of(gpu_stream(i)));
    fake_gpu(kGpu).resume(handle_of(Stream::default_stream(gpu())));
    EngineTest::TearDown();
  }
  Tensor on_gpu(std::vector<float> v) {
    Tensor t = from_vector(v, Shape{int64_t(v.size())}, gpu());
    t.wait_to_read();
    return t;
  }
};

TEST_F(FakeGpu, OpsRunOnTheDeviceAndCopyBack) {
  EXPECT_TRUE(op_supported(gpu(), OpId::add));
  Tensor x = on_gpu({1, 2, 3});
  Tensor y = x * 2.0 + 1.0;
  EXPECT_EQ(y.device(), gpu());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 5, 7}));
  Tensor back = y.to(Device::cpu());
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_FLOAT_EQ(sum(y).item<float>(), 15.0f);
}

TEST_F(FakeGpu, CompleteMeansTheDeviceWroteTheTimelineNotLaunched) {
  Tensor x = on_gpu({1, 2});
  Stream s = Stream::default_stream(gpu());
  fake_gpu(kGpu).pause(handle_of(s));
  Tensor y = x + 1.0;
  ASSERT_TRUE(launched_all(s));           // the worker launched it...
  EXPECT_FALSE(becomes_ready_within(y));  // ...but the device has not run it
  EXPECT_LT(s.executed(), s.queued());
  EXPECT_GE(Engine::get().stats().inflight_bytes, y.nbytes());  // still held by queued work
  fake_gpu(kGpu).resume(handle_of(s));
  y.wait_to_read();
  EXPECT_TRUE(y.is_ready());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 3}));
}

// Allocated at execution, a GPU output takes its block when the worker launches its op,
// tagged with that task, and gives it back once the device ran everything that used it.
TEST_F(FakeGpu, OutputsAllocatedAtExecutionTakeTheirBlocksAtLaunch) {
  Tensor x = on_gpu({1, 2});
  Stream s = Stream::default_stream(gpu());
  Allocator& alloc = Allocator::get(gpu());
  Engine::get().set_allocation(Allocation::at_execution);  // EngineTest restores it
  Engine::get().reclaim();
  const size_t before = alloc.stats().active_bytes;
  s.impl()->worker_held.store(true);  // the worker launches nothing yet
  Tensor y = x + 1.0;
  EXPECT_FALSE(y.storage()->resident());
  EXPECT_EQ(alloc.stats().active_bytes, before) << "a queued op took device memory";
  fake_gpu(kGpu).pause(handle_of(s));
  s.impl()->worker_held.store(false);
  s.impl()->wake();
  ASSERT_TRUE(launched_all(s));
  EXPECT_TRUE(y.storage()->resident()) << "the launch did not take the block";
  EXPECT_FALSE(y.is_ready()) << "the device has not run it";
  EXPECT_EQ(alloc.stats().active_bytes, before + y.storage()->bytes());
  fake_gpu(kGpu).resume(handle_of(s));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 3}));
  y = Tensor();
  Engine::get().reclaim();
  EXPECT_EQ(alloc.stats().active_bytes, before);
}

TEST_F(FakeGpu, OneEventRecordAndOneWaitPerCrossStreamHazard) {
  FakeDevice& fake = fake_gpu(kGpu);
  Stream a = gpu_stream(0), b = gpu_stream(1);
  Tensor x = on_gpu({1, 2, 3});
  fake.pause(handle_of(a));
  Tensor y;
  {
    StreamGuard g(a);
    y = x + 1.0;  // written on a, which the device holds
  }
  ASSERT_TRUE(launched_all(a));
  fake.clear_calls();
  Tensor z, w;
  {
    StreamGuard g(b);
    z = y * 2.0;  // reads y: waits for a (read-after-write)
    w = x * 3.0;  // no hazard: x's writer is complete
  }
  ASSERT_TRUE(launched_all(b));
  ASSERT_TRUE(wait_until([&] { return fake.count(Call::record, handle_of(a)) >= 1; }));
  EXPECT_EQ(fake.count(Call::record, handle_of(a)), 1u);
  EXPECT_EQ(fake.count(Call::wait, handle_of(b)), 1u);
  EXPECT_EQ(fake.count(Call::wait), 1u);
  EXPECT_FALSE(becomes_ready_within(z));  // b's device queue waits for a's event
  fake.resume(handle_of(a));
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{4, 6, 8}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{3, 6, 9}));
}

TEST_F(FakeGpu, NoEventsWithoutAHazard) {
  FakeDevice& fake = fake_gpu(kGpu);
  Stream a = gpu_stream(0), b = gpu_stream(1);
  Tensor x = on_gpu({1, 2, 3});
  fake.clear_calls();
  Tensor y, z;
  {
    StreamGuard g(a);
    y = x + 1.0;
  }
  {
    StreamGuard g(b);
    z = x * 2.0;  // both only read x
  }
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(fake.count(Call::record), 0u);
  EXPECT_EQ(fake.count(Call::wait), 0u);
}

TEST_F(FakeGpu, WriteAfterReadOnAnotherStreamWaitsForTheReader) {
  FakeDevice& fake = fake_gpu(kGpu);
  Stream a = gpu_stream(0), b = gpu_stream(1);
  Tensor x = on_gpu({1, 2, 3});
  fake.pause(handle_of(a));
  Tensor y;
  {
    StreamGuard g(a);
    y = x * 10.0;  // reads x on a (held)
  }
  ASSERT_TRUE(launched_all(a));
  {
    StreamGuard g(b);
    NoGrad ng;
    x.mul_(0.0);  // writes x on b: must wait for a's read
  }
  ASSERT_TRUE(launched_all(b));
  EXPECT_FALSE(becomes_ready_within(x));
  fake.resume(handle_of(a));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

// A kernel's workspace is tagged with its task: another stream may not take the block
// before that task is complete; the same stream may (its FIFO orders the uses).
TEST_F(FakeGpu, BlocksAreNotReusedAcrossStreamsBeforeTheyPassed) {
  FakeDevice& fake = fake_gpu(kGpu);
  Stream a = gpu_stream(0), b = gpu_stream(1);
  constexpr size_t kBytes = 12345 * 64;
  auto take = [&](const Stream& s) {
    auto got = std::make_shared<std::atomic<void*>>(nullptr);
    StreamGuard g(s);
    Engine::get().submit(
        gpu(), "workspace_user", {}, {},
        [got] {
          StorageRef ws = Allocator::get(Device::cuda(kGpu)).workspace(kBytes, "workspace_user");
          got->store(ws->data());
        },
        Site::current());
    EXPECT_TRUE(wait_until([&] { return got->load() != nullptr; }));
    return got->load();
  };
  fake.pause(handle_of(a));
  void* on_a = take(a);
  void* on_b = take(b);
  EXPECT_NE(on_a, on_b) << "a block a held stream may still use was given to another stream";
  void* again_on_a = take(a);
  EXPECT_TRUE(again_on_a == on_a || again_on_a == on_b) << "same-stream reuse is allowed";
  fake.resume(handle_of(a));
  a.synchronize();
  b.synchronize();
  // Both blocks are free for any stream now: two holds on b get both back.
  std::vector<void*> got;
  {
    StreamGuard g(b);
    auto out = std::make_shared<std::vector<void*>>();
    auto m = std::make_shared<std::mutex>();
    Engine::get().submit(
        gpu(), "workspace_user", {}, {},
        [out, m] {
          Allocator& al = Allocator::get(Device::cuda(kGpu));
          StorageRef w1 = al.workspace(kBytes, "w"), w2 = al.workspace(kBytes, "w");
          std::lock_guard lock(*m);
          out->push_back(w1->data());
          out->push_back(w2->data());
        },
        Site::current());
    b.synchronize();
    got = *out;
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0] == on_a || got[1] == on_a) << "the block stays unusable after a passed";
}

TEST_F(FakeGpu, ALaunchErrorFailsThatOpAndWhatReadsIt) {
  Tensor x = on_gpu({1, 2});
  fake_gpu(kGpu).fail_next_launch("bad launch configuration");
  Tensor y = x + 1.0;  // the launch error is this op's
  Tensor z = y * 2.0;  // inherits it
  Tensor w = x * 3.0;  // unaffected
  std::string e = error_of([&] { y.wait_to_read(); });
  EXPECT_TRUE(contains(e, "[add]"));
  EXPECT_TRUE(contains(e, "bad launch configuration"));
  EXPECT_TRUE(contains(error_of([&] { z.wait_to_read(); }), "bad launch configuration"));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{3, 6}));
  clear_pending_failures();
}

// An entry that throws (a CUDA call it checked failed) leaves no error behind for the next
// op's launch check to be blamed for.
TEST_F(FakeGpu, AThrowingEntryLeavesNoErrorForTheNextOp) {
  Tensor x = on_gpu({1, 2});
  Tensor out = on_gpu({0, 0});
  fake_gpu(kGpu).fail_next_launch("the throwing entry's own error");
  Engine::get().submit(
      gpu(), "throwing_entry", {x.storage()}, {out.storage()},
      [] { throw std::runtime_error("a checked CUDA call failed"); }, Site::current());
  Tensor y = x + 1.0;
  EXPECT_TRUE(contains(error_of([&] { out.wait_to_read(); }), "a checked CUDA call failed"));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 3})) << "the next op is not blamed";
  clear_pending_failures();
}

TEST_F(FakeGpu, AStickyErrorFailsTheDeviceAndNothingWaitsForEver) {
  FakeDevice& dead = fake_gpu(kDeadGpu);
  Device d = Device::cuda(kDeadGpu);
  Tensor x = from_vector(std::vector<float>{1, 2}, Shape{2}, d);
  x.wait_to_read();
  Stream s = Stream::default_stream(d);
  dead.pause(handle_of(s));
  Tensor y = x + 1.0;
  Tensor z = y * 2.0;
  ASSERT_TRUE(launched_all(s));
  dead.inject_sticky_error("an illegal memory access was encountered");
  // Found by the waiting thread; wait_all reports it as the earliest unreported failure.
  EXPECT_TRUE(contains(error_of([] { Engine::get().wait_all(); }), "cuda:15 failed"));
  std::string e = error_of([&] { z.wait_to_read(); });
  EXPECT_TRUE(contains(e, "cuda:15 failed"));
  EXPECT_TRUE(contains(e, "illegal memory access"));
  EXPECT_TRUE(contains(e, "TIDE_ENGINE=sync"));
  EXPECT_TRUE(contains(e, "'add'")) << "names the first op launched and not complete";
  EXPECT_TRUE(contains(error_of([&] { x.wait_to_read(); }), "cuda:15 failed"))
      << "every storage on the device reads as failed";
  EXPECT_TRUE(contains(error_of([&] { (void)(x + 1.0); }), "cannot queue work on cuda:15"));
  EXPECT_EQ((ones({2}) + 1.0).to_vector<float>(), (std::vector<float>{2, 2}))
      << "the CPU keeps working";
}

// As on a real GPU (tests/cuda/fault): a kernel faults asynchronously and the next op's
// launch check is where the worker finds out. That op's error is the device's failure,
// naming the op that may have caused it, and a new block is refused with the same message
// instead of cudaMalloc's bare sticky error (a cudaMalloc that finds it fails the device
// the same way).
TEST_F(FakeGpu, AFaultFoundAtTheNextLaunchFailsTheDevice) {
  FakeDevice& dev = fake_gpu(kFaultedGpu);
  Device d = Device::cuda(kFaultedGpu);
  Tensor x = from_vector(std::vector<float>{1, 2}, Shape{2}, d);
  (x + 1.0).wait_to_read();
  Engine::get().synchronize();  // its block is cached for y: no cudaMalloc finds the fault
  Stream s = Stream::default_stream(d);
  dev.pause(handle_of(s));
  Engine::get().submit(
      d, "bad_kernel", {x.storage()}, {x.storage()}, [](const KernelContext&) {}, Site::current());
  ASSERT_TRUE(launched_all(s));
  dev.inject_sticky_error("an illegal memory access was encountered");
  Tensor y = x + 1.0;
  std::string e = error_of([&] { y.wait_to_read(); });
  EXPECT_TRUE(contains(e, "cuda:14 failed")) << e;
  EXPECT_TRUE(contains(e, "TIDE_ENGINE=sync")) << e;
  EXPECT_TRUE(contains(e, "'bad_kernel'")) << e;
  e = error_of([&] { (void)zeros({12345}, DType::float32, d); });
  EXPECT_TRUE(contains(e, "cannot queue work on cuda:14")) << e;
  EXPECT_FALSE(contains(e, "cudaMalloc")) << e;
  EXPECT_EQ((ones({2}) + 1.0).to_vector<float>(), (std::vector<float>{2, 2}))
      << "the CPU keeps working";
  clear_pending_failures();
}

// A frontend running ahead makes a new block per queued op: tiny ones come out of shared
// segments (core/segment_source.h), not one cudaMalloc each.
TEST_F(FakeGpu, TinyTensorsComeOutOfSegmentsNotOneMallocEach) {
  FakeDevice& fake = fake_gpu(kGpu);
  Tensor x = on_gpu({1, 2});
  Allocator::get(gpu()).empty_cache();
  const size_t mallocs = fake.count(FakeDevice::CallKind::malloc);
  std::vector<Tensor> kept;  // all alive: 1000 distinct blocks
  for (int i = 0; i < 1000; ++i) kept.push_back(x + double(i));
  EXPECT_LE(fake.count(FakeDevice::CallKind::malloc) - mallocs, 2u);
  EXPECT_EQ(kept[999].to_vector<float>(), (std::vector<float>{1000, 1001}));
  EXPECT_EQ(kept[7].to_vector<float>(), (std::vector<float>{8, 9}));
}

// TIDE_CUDA_SEGMENTS=0 (for compute-sanitizer): a cudaMalloc per block again. Read when
// a device is first used: a fake of its own here.
TEST(FakeGpuMemory, SegmentsCanBeTurnedOffForTheSanitizer) {
  constexpr int kUnsegmentedGpu = 12;
  const Device d = Device::cuda(kUnsegmentedGpu);
  FakeDevice& fake = fake_gpu(kUnsegmentedGpu);
  ::setenv("TIDE_CUDA_SEGMENTS", "0", 1);
  (void)Allocator::get(d);  // the device's first use: its runtime reads the variable
  ::unsetenv("TIDE_CUDA_SEGMENTS");
  const size_t mallocs = fake.count(FakeDevice::CallKind::malloc);
  {
    std::vector<Tensor> kept;
    for (int i = 0; i < 10; ++i) kept.push_back(Tensor::empty({2}, DType::float32, d));
  }
  EXPECT_EQ(fake.count(FakeDevice::CallKind::malloc) - mallocs, 10u);
  fake_gpu(kUnsegmentedGpu + 1);
  ::setenv("TIDE_CUDA_SEGMENTS", "yes", 1);
  std::string e = error_of([&] { (void)Allocator::get(Device::cuda(kUnsegmentedGpu + 1)); });
  ::unsetenv("TIDE_CUDA_SEGMENTS");
  EXPECT_TRUE(contains(e, "TIDE_CUDA_SEGMENTS must be 0")) << e;
}

TEST(FakeGpuMemory, OutOfMemoryNamesTheRequestAndTheDevice) {
  fake_gpu(kSmallGpu, size_t(1) << 20);
  Device d = Device::cuda(kSmallGpu);
  std::string e = error_of([&] { (void)Tensor::empty({1 << 20}, DType::float32, d, "zeros"); });
  EXPECT_TRUE(contains(e, "[zeros] out of memory on cuda:9"));
  EXPECT_TRUE(contains(e, "requested 4194304 bytes"));
  EXPECT_TRUE(contains(e, "bytes in use"));
  EXPECT_TRUE(contains(e, "cached"));
  EXPECT_TRUE(contains(e, "bytes free of 1048576"));
}

TEST(FakeGpuMemory, TheCacheIsReturnedAndTheRequestRetriedBeforeFailing) {
  fake_gpu(kSmallGpu, size_t(1) << 20);
  Device d = Device::cuda(kSmallGpu);
  Allocator& al = Allocator::get(d);
  { Tensor t = Tensor::empty({150'000}, DType::float32, d); }  // 600 KB, then cached
  EXPECT_GE(al.stats().cached_bytes, 600'000u);
  uint64_t flushes = al.stats().cache_flushes;
  Tensor u = Tensor::empty({175'000}, DType::float32, d);  // 700 KB: fits only without it
  EXPECT_EQ(al.stats().cache_flushes, flushes + 1);
  EXPECT_GE(u.nbytes(), 700'000u);
}

TEST(FakeGpuMemory, TheLimitAppliesToTheDevice) {
  fake_gpu(kGpu);
  Allocator& al = Allocator::get(gpu());
  al.set_limit(al.stats().active_bytes + 4096);
  std::string e = error_of([&] { (void)Tensor::empty({100'000}, DType::float32, gpu(), "ones"); });
  al.set_limit(0);
  EXPECT_TRUE(contains(e, "[ones] out of memory on cuda:8"));
  EXPECT_TRUE(contains(e, "limit"));
}

TEST_F(FakeGpu, HostReadsGoThroughPinnedStaging) {
  FakeDevice& fake = fake_gpu(kGpu);
  Tensor x = on_gpu({4, 5, 6});
  fake.clear_calls();
  EXPECT_FLOAT_EQ(x[1].item<float>(), 5.0f);
  EXPECT_EQ(fake.count(Call::memcpy), 1u);
  EXPECT_EQ(fake.count(Call::synchronize), 1u);
  EXPECT_GE(cuda::DeviceRuntime::get(kGpu).pinned().stats().num_allocs, 1u);
}

TEST_F(FakeGpu, SynchronousModeSynchronizesAfterEachTask) {
  FakeDevice& fake = fake_gpu(kGpu);
  Tensor x = on_gpu({1, 2});
  fake.clear_calls();
  SynchronousGuard sync;
  Tensor y = x + 1.0;
  EXPECT_TRUE(y.is_ready());  // ran to completion before the call returned
  EXPECT_GE(fake.count(Call::synchronize), 1u);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 3}));
}

TEST_F(FakeGpu, BackpressureCountsWorkTheDeviceHasNotFinished) {
  FakeDevice& fake = fake_gpu(kGpu);
  Tensor x = on_gpu({1});
  Stream s = Stream::default_stream(gpu());
  Engine::get().set_max_inflight_ops(2);
  fake.pause(handle_of(s));
  Tensor a = x + 1.0, b = x + 2.0;
  Flag done;
  std::thread t([&] {
    Tensor c = x + 3.0;  // a third op: blocks until the device finishes one
    done.set();
  });
  EXPECT_FALSE(done.wait_for(200ms));
  fake.resume(handle_of(s));
  EXPECT_TRUE(done.wait_for());
  t.join();
  Engine::get().set_max_inflight_ops(0);
  EXPECT_GE(Engine::get().stats().backpressure_stalls, 1u);
}

TEST_F(FakeGpu, FourFrontendThreads) {
  Tensor x = on_gpu({1, 1, 1, 1});
  std::vector<std::thread> threads;
  std::vector<float> results(4);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      StreamGuard g(gpu_stream(k % 3));
      Tensor y = x;
      for (int i = 0; i < 200; ++i) y = y + 1.0;
      results[size_t(k)] = sum(y).item<float>();
    });
  for (auto& t : threads) t.join();
  for (float r : results) EXPECT_FLOAT_EQ(r, 4 * 201.0f);
}

TEST_F(FakeGpu, ShutdownWaitsForLaunchedWork) {
  FakeDevice& fake = fake_gpu(kGpu);
  Tensor x = on_gpu({1, 2});
  Stream s = Stream::default_stream(gpu());
  fake.pause(handle_of(s));
  Tensor y = x + 1.0;
  ASSERT_TRUE(launched_all(s));
  std::thread release([&] {
    std::this_thread::sleep_for(100ms);
    fake.resume(handle_of(s));
  });
  Engine::get().shutdown(ShutdownMode::drain);
  release.join();
  EXPECT_TRUE(y.is_ready());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(Engine::get().stats().queue_depth, 0u);
}

TEST_F(FakeGpu, MemorySnapshotOfTheDevice) {
  Tensor x = on_gpu(std::vector<float>(1000, 1.0f));
  MemorySnapshot m = memory_snapshot(gpu());
  EXPECT_EQ(m.device, gpu());
  EXPECT_EQ(m.allocator.active_bytes, Allocator::get(gpu()).stats().active_bytes);
  EXPECT_GE(m.allocator.active_bytes, x.nbytes());
  EXPECT_EQ(m.device_total_bytes, size_t(1) << 32);  // the fake's capacity
  EXPECT_EQ(m.device_free_bytes, m.device_total_bytes - fake_gpu(kGpu).bytes_in_use());
  EXPECT_EQ(memory_snapshot().device_total_bytes, 0u) << "the CPU has no device figures";
}

// The profiler shows GPU streams as tracks of their own: each task's span on the device,
// after the worker launched it, in stream order.
TEST_F(FakeGpu, ProfilerRecordsGpuSpansOnTheirOwnTracks) {
  Tensor x = on_gpu({1, 2, 3});
  profiler::start();
  Tensor y = x;
  for (int i = 0; i < 5; ++i) y = y * 2.0;
  y.wait_to_read();
  profiler::stop();
  std::vector<profiler::GpuSpan> spans = profiler::gpu_spans();
  std::vector<profiler::OpRecord> launches = profiler::ops();
  ASSERT_EQ(spans.size(), 5u);
  int stream = Stream::default_stream(gpu()).id();
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_STREQ(spans[i].op, "mul");
    EXPECT_EQ(spans[i].stream, stream);
    EXPECT_LE(spans[i].start_ns, spans[i].end_ns);
    if (i) EXPECT_GE(spans[i].start_ns, spans[i - 1].end_ns) << "stream order";
  }
  int64_t first_launch = INT64_MAX;
  for (const auto& r : launches)
    if (r.stream == stream) first_launch = std::min(first_launch, r.start_ns);
  EXPECT_GE(spans[0].start_ns + 200'000, first_launch) << "a GPU span starts after its launch";
  std::string path = ::testing::TempDir() + "/tide_gpu_trace.json";
  profiler::write_chrome_trace(path);
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "cuda:8, on the GPU"));
  EXPECT_TRUE(contains(text, "cuda:8 launcher"));
  EXPECT_TRUE(contains(text, "\"cat\":\"gpu\""));
}

TEST(FakeGpuDevices, UnknownDevicesGiveClearErrors) {
  EXPECT_TRUE(
      contains(error_of([] { (void)zeros({2}, DType::float32, Device::cuda(3)); }), "cuda:3"));
  EXPECT_TRUE(contains(error_of([] { (void)ones({2}).to(Device::cuda(4)); }), "[to]"));
  EXPECT_TRUE(contains(error_of([] { Stream::create(Device::cuda(5)); }), "[stream]"));
  EXPECT_TRUE(
      contains(error_of([] { (void)memory_snapshot(Device::cuda(5)); }), "[memory_snapshot]"));
}

}  // namespace
}  // namespace tide
