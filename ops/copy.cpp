// Copies between devices: Tensor::to. A copy goes through pinned host staging in two
// queued tasks, each on the stream of the device it runs on, ordered by hazard tracking:
//   CPU -> GPU: the CPU stream copies into staging; the GPU stream copies staging -> device.
//   GPU -> CPU: the GPU stream copies device -> staging; the CPU stream copies staging out.
//   GPU -> GPU: device -> staging on the first, staging -> device on the second.
// Nothing waits, and each device's queue keeps running ahead. Staging blocks come from the
// GPU's pinned allocator and return to it when the second task is complete.
#include <cstring>

#include "core/allocator.h"
#include "core/cuda/device_api.h"
#include "core/cuda/runtime.h"
#include "core/thread_pool.h"
#include "ops/autograd.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;

namespace {

// dst[0, bytes) = src[0, bytes) on the host, split over the pool like clone.
void host_copy(DataRef<unsigned char> dst, DataRef<unsigned char> src, size_t bytes) {
  unsigned char* d = dst.get();
  const unsigned char* s = src.get();
  parallel_for(int64_t(bytes), kParallelGrain * 4,
               [&](int64_t lo, int64_t hi) { std::memcpy(d + lo, s + lo, size_t(hi - lo)); });
}

DataRef<unsigned char> bytes_of(const Tensor& t) {
  return {t.storage(), t.offset() * int64_t(size_of(t.dtype()))};
}

// Queues dst = src where exactly one side is a GPU and the other pinned staging.
void queue_device_copy(Device gpu, Storage* src, DataRef<unsigned char> s, Storage* dst,
                       DataRef<unsigned char> d, size_t bytes, cuda::CopyKind kind, Site site) {
  Engine::get().submit(
      gpu, "to", {src}, {dst},
      [s, d, bytes, kind](const KernelContext& ctx) {
        ctx.api->memcpy_async(d.get(), s.get(), bytes, kind, ctx.stream);
      },
      site);
}

void queue_host_copy(Storage* src, DataRef<unsigned char> s, Storage* dst, DataRef<unsigned char> d,
                     size_t bytes, Site site) {
  Engine::get().submit(
      Device::cpu(), "to", {src}, {dst}, [s, d, bytes] { host_copy(d, s, bytes); }, site);
}

}  // namespace

Tensor Tensor::to(Device device, Site site) const {
  const char* op = op_name(OpId::to);
  check_defined(*this, op);
  Device from = this->device();
  if (from == device) return *this;
  TIDE_CHECK(
      device.is_cpu() || cuda::available(device.index), op, "cannot copy ", describe(*this),
      " from ", from.str(), " to ", device.str(), ": ",
      device.is_cuda() && cuda::device_count() == 0 ? "this process has no GPU" : "no such device");
  Tensor y = Tensor::empty(shape(), dtype(), device, op);
  const size_t bytes = nbytes();
  if (CaptureSink* c = capturing();
      c && bytes > 0 && from.is_cpu() && device.is_cuda() && c->host_data(storage())) {
    // Host data made inside a trace on a GPU (from_vector(..., gpu)): a trace runs on one
    // device, so its trace-time bytes are kept in pinned memory and one node copies them
    // into y on every replay, as eager copies them on every call.
    StorageRef kept;
    {
      CapturePause pause;  // the trace's own memory, not a value of it
      kept = cuda::DeviceRuntime::get(device.index, op).pinned().allocate(bytes, op);
    }
    std::memcpy(kept->data(), bytes_of(*this).get(), bytes);
    Engine::get().submit(
        device, op, {}, {y.storage()},
        [kept, d = bytes_of(y), bytes](const KernelContext& ctx) {
          ctx.api->memcpy_async(d.get(), kept->data(), bytes, cuda::CopyKind::host_to_device,
                                ctx.stream);
        },
        site);
  } else if (bytes > 0) {
    Device gpu = from.is_cuda() ? from : device;  // the GPU whose pinned staging is used
    Allocator& pinned = cuda::DeviceRuntime::get(gpu.index, op).pinned();
    StorageRef staging = pinned.allocate(bytes, op);
    DataRef<unsigned char> st{staging.get(), 0};
    if (from.is_cpu()) {
      queue_host_copy(storage(), bytes_of(*this), staging.get(), st, bytes, site);
      queue_device_copy(device, staging.get(), st, y.storage(), bytes_of(y), bytes,
                        cuda::CopyKind::host_to_device, site);
    } else {
      queue_device_copy(from, storage(), bytes_of(*this), staging.get(), st, bytes,
                        cuda::CopyKind::device_to_host, site);
      if (device.is_cpu())
        queue_host_copy(staging.get(), st, y.storage(), bytes_of(y), bytes, site);
      else
        queue_device_copy(device, staging.get(), st, y.storage(), bytes_of(y), bytes,
                          cuda::CopyKind::host_to_device, site);
    }
  }
  autograd::record(op, y, {this},
                   [from](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
  return y;
}

}  // namespace tide
