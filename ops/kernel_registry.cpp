// Which devices implement which ops (op_supported) and the pieces of the kernel-entry seam
// that are not templates (ops/kernel_entry.h). CUDA kernels register once, on first use of
// a GPU: ops/cuda/register.cu fills CudaKernel<...>::fn and the CUDA op list.
#include <array>
#include <atomic>
#include <mutex>

#include "core/cuda/runtime.h"
#include "core/engine/failure.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"

namespace tide {

namespace kernels::detail {

#if defined(TIDE_WITH_CUDA)
// ops/cuda/register.cu: sets every CUDA entry and marks the ops CUDA implements.
void register_cuda_kernels(std::array<bool, size_t(OpId::count_)>& ops);
#endif

namespace {
std::array<bool, size_t(OpId::count_)> g_cuda_ops{};
}

bool ensure_cuda_kernels() {
#if defined(TIDE_WITH_CUDA)
  static const bool registered = [] {
    register_cuda_kernels(g_cuda_ops);
    return true;
  }();
  return registered;
#else
  return false;
#endif
}

bool runs_host_kernels(Device d) { return d.is_cuda() && cuda::runs_host_kernels(d.index); }

void throw_no_kernel(OpId op, Device d, const char* what) {
  throw Error(op_name(op), tide::detail::concat("has no CUDA kernel for these operands (", what,
                                                ") on ", d.str()));
}

}  // namespace kernels::detail

namespace kernels {

namespace {
std::array<std::atomic<CapturePreparer>, size_t(OpId::count_)> g_preparers{};
}

CapturePreparer set_capture_preparer(OpId op, CapturePreparer fn) {
  return g_preparers[size_t(op)].exchange(fn);
}

void prepare_capture(std::string_view op, const KernelContext& ctx) {
  for (const OpTraits& t : all_ops())
    if (t.name == op) {
      if (CapturePreparer fn = g_preparers[size_t(t.id)].load()) fn(ctx);
      return;
    }
}

void run_on_host(const KernelContext& ctx, std::function<void()> fn) {
  cuda::launch_host(ctx, std::move(fn));
}

HostKernelIo::HostKernelIo(std::initializer_list<Storage*> reads,
                           std::initializer_list<Storage*> writes, const char* op, Site site)
    : num_reads(uint8_t(reads.size())), num_writes(uint8_t(writes.size())), op(op), site(site) {
  std::copy(reads.begin(), reads.end(), storages);
  std::copy(writes.begin(), writes.end(), storages + reads.size());
}

bool HostKernelIo::inherit_failure() const {
  for (int i = 0; i < num_reads; ++i)
    if (Failure* f = storages[i]->failure()) {
      for (int j = 0; j < num_writes; ++j) storages[num_reads + j]->poison(f);
      return true;
    }
  return false;
}

void HostKernelIo::take_addresses() {
  for (int i = 0; i < num_reads + num_writes; ++i)
    if (storages[i]->is_slot()) at_launch[i] = storages[i]->data();
}

HostKernelIo::AtLaunch::AtLaunch(const HostKernelIo& io) : io(io) {
  for (int i = 0; i < io.num_reads + io.num_writes; ++i) {
    Storage* s = io.storages[i];
    if (!s->is_slot() || !io.at_launch[i] || s->data() == io.at_launch[i]) continue;
    moved[i] = s->data();
    was_moved[i] = true;
    s->rebind(io.at_launch[i]);
  }
}

HostKernelIo::AtLaunch::~AtLaunch() {
  for (int i = io.num_reads + io.num_writes - 1; i >= 0; --i)
    if (was_moved[i]) io.storages[i]->rebind(moved[i]);
}

void HostKernelIo::fail(const char* what) const {
  Failure* f = Failure::create(op, strip_op(what, op), site);
  for (int j = 0; j < num_writes; ++j) storages[num_reads + j]->poison(f);
  f->release();
}
}  // namespace kernels

bool op_supported(Device device, OpId op) {
  if (op >= OpId::count_) return false;
  if (device.is_cpu()) return true;
  if (!device.is_cuda() || !cuda::available(device.index)) return false;  // no such device
  if (kernels::detail::runs_host_kernels(device)) return true;
  kernels::detail::ensure_cuda_kernels();
  return kernels::detail::g_cuda_ops[size_t(op)];
}

namespace detail {
void throw_unsupported(Device d, OpId id) {
  // A GPU this process cannot use: its runtime says why (no CUDA in this build, no device).
  if (d.is_cuda() && !cuda::available(d.index)) cuda::DeviceRuntime::get(d.index, op_name(id));
  throw Error(op_name(id), concat("has no ", d.is_cuda() ? "CUDA kernel" : "kernel", " (on ",
                                  d.str(), "); op_supported(device, op) tells before the call"));
}
void throw_unsupported(const Tensor& t, OpId id) {
  if (t.device().is_cuda() && !cuda::available(t.device().index)) throw_unsupported(t.device(), id);
  throw Error(op_name(id), concat("has no ", t.device().is_cuda() ? "CUDA kernel" : "kernel", " (",
                                  describe(t), " on ", t.device().str(),
                                  "); op_supported(device, op) tells before the call"));
}
}  // namespace detail

}  // namespace tide
