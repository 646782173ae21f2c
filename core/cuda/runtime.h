// The GPUs a process uses (docs/architecture.md, CUDA): one DeviceRuntime per CUDA device index,
// created on first use, backed by the real CUDA runtime (CUDA builds with a GPU) or by a DeviceApi
// a test installed (the recording fake). It owns the device's allocators (device memory and pinned
// staging), its streams' bookkeeping, the stream used for host reads, and the device's failure
// state. Everything here compiles without CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/device_api.h"
#include "core/engine/device_stream.h"
#include "core/profiler.h"

namespace tide {
class Failure;
}

namespace tide::cuda {

class CudaStream;

class DeviceRuntime {
 public:
  // The runtime of cuda:index, created on first use. Throws tide::Error("[op] ...") when
  // this process has no such GPU (no CUDA in this build, no device, no installed fake).
  static DeviceRuntime& get(int index, const char* op = "cuda");

  DeviceRuntime(int index, std::shared_ptr<DeviceApi> api);
  Device device() const { return Device::cuda(index_); }
  DeviceApi& api() { return *api_; }
  Allocator& allocator() { return *allocator_; }
  Allocator& pinned() { return *pinned_; }

  // The device's failure (a sticky asynchronous error), or nullptr while it works.
  Failure* failure() const;
  // Marks the device failed once, from a sticky error found at `where`: every storage on
  // it reads as failed with a message that names the first op launched and not complete
  // and advises TIDE_ENGINE=sync; every launched task is marked complete so nothing
  // waits for ever; later submits throw. The CPU keeps working.
  void fail(const Status& st, const char* where);
  // Throws "[op] cannot queue work on cuda:N, which failed earlier: ..." once the device
  // failed; returns at once otherwise.
  void check_usable(const char* op) const;

  // Copies `bytes` of device memory at src to host memory dst through pinned staging, on
  // a stream of its own; waits for the copy only. The caller has waited for the writer.
  // Throws "[op] ..." when the copy fails.
  void copy_to_host(void* dst, const void* src, size_t bytes, const char* op);

  uint64_t next_launch() { return launches_.fetch_add(1, std::memory_order_relaxed); }
  void add_stream(CudaStream* s);
  void remove_stream(CudaStream* s);
  // The profiler's GPU spans of this device's streams.
  void collect_spans(std::vector<profiler::GpuSpan>& out);

 private:
  const int index_;
  const std::shared_ptr<DeviceApi> api_;
  std::unique_ptr<Allocator> allocator_, pinned_;
  std::mutex mu_;  // streams_, failing, the copy stream
  std::vector<CudaStream*> streams_;
  StreamHandle copy_stream_ = nullptr;
  std::atomic<uint64_t> launches_{0};
};

// Tests: backs cuda:index with `api` (the recording fake) for the rest of the process.
// Throws "[cuda]" when cuda:index was already used.
void install_device(int index, std::shared_ptr<DeviceApi> api);
// GPUs the CUDA runtime reports (0 without CUDA or without a device; fakes not counted).
int device_count();
// Whether cuda:index can be used here: a real GPU, an installed device, or one of the
// fakes TIDE_FAKE_GPUS=N asks for (cuda:0 .. cuda:N-1, for tests of GPU code paths on
// machines without one; they take precedence over real GPUs).
bool available(int index);

// Whether CUDA graphs join tide's kernels by programmatic edges, so that a kernel's launch
// overlaps the kernel before it (core/cuda/dependent_launch.h; Hopper and later). true
// unless the environment sets TIDE_CUDA_PDL=0 (read once); a device that refuses them gets
// ordinary edges (the graph is built again). A graph keeps the edges it was built with.
// The setter is for comparisons and tests.
bool programmatic_edges_enabled();
void set_programmatic_edges_enabled(bool on);
// Whether a graph built on this thread now gets them: enabled, and not held off here by an
// OrdinaryEdgesOnly in scope (the executor's rebuild of a graph CUDA refused with them).
bool programmatic_edges_wanted();
class OrdinaryEdgesOnly {
 public:
  OrdinaryEdgesOnly();
  ~OrdinaryEdgesOnly();
  OrdinaryEdgesOnly(const OrdinaryEdgesOnly&) = delete;
  OrdinaryEdgesOnly& operator=(const OrdinaryEdgesOnly&) = delete;

 private:
  bool before_;
};
// Programmatic edges added to graphs so far in this process (a count for tests and benches).
uint64_t programmatic_edges_added();
// Of those, the ones added by graphs built on the calling thread.
uint64_t programmatic_edges_added_here();
void note_programmatic_edges(uint64_t n);

// For the engine, the allocator and the ops:
std::unique_ptr<DeviceStream> make_stream(StreamImpl& owner);
Allocator& device_allocator(Device d);
bool runs_host_kernels(int index);
// Host functions a CUDA graph launches on every replay: owned by the graph.
struct HostFunctions {
  std::vector<std::unique_ptr<std::function<void()>>> fns;
};
// Runs fn as a host function in ctx's stream order (a fake device's kernels). While a
// graph captures (ctx.host_functions set), fn is kept there and runs on every launch.
void launch_host(const KernelContext& ctx, std::function<void()> fn);

}  // namespace tide::cuda
