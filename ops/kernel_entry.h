// The backend seam of the ops (docs/architecture.md, CUDA; docs/contributing.md, Adding an op): a
// front-end (ops/<family>.cpp) checks its arguments, allocates, records the gradient, then queues
// one *kernel entry* of its family: a function (const KernelContext&, const Args&, const Extra&)
// where Args holds the data references and sizes and Extra the functor or options. Each device
// implements the entries: CPU loops in ops/cpu/ (always linked), CUDA launchers in ops/cuda/*.cu,
// which register themselves in CudaKernel<...>::fn (ops/cuda/register.cu, CUDA builds only). A
// device with no implementation fails loudly at the call ("[op] has no CUDA kernel ...");
// op_supported() answers beforehand. Not a public header.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/kernel_context.h"
#include "ops/kernel_types.h"
#include "ops/op_traits.h"

namespace tide::kernels {

namespace detail {
// Registers the CUDA kernels and their ops once (ops/kernel_registry.cpp); false in builds
// without CUDA.
bool ensure_cuda_kernels();
// True when `d` is a GPU whose kernels run as host functions in stream order (a test's
// recording fake): it takes the CPU implementations.
bool runs_host_kernels(Device d);
[[noreturn]] void throw_no_kernel(OpId op, Device d, const char* what);
}  // namespace detail

// The implementation of an entry for device d: `cpu` on the CPU (and on a host-kernel
// fake), the registered CUDA launcher on a GPU. Throws "[op] has no CUDA kernel" when the
// GPU has none.
template <class Args, class Extra>
KernelFn<Args, Extra> select(OpId op, Device d, KernelFn<Args, Extra> cpu, bool* on_host) {
  *on_host = false;
  if (d.is_cpu()) [[likely]]
    return cpu;
  if (detail::runs_host_kernels(d)) {
    *on_host = true;
    return cpu;
  }
  detail::ensure_cuda_kernels();
  if (auto f = CudaKernel<Args, Extra>::fn) return f;
  detail::throw_no_kernel(op, d, typeid(Args).name());
}

// What a kernel of an op needs done on the launching thread before a CUDA graph captures
// it: creating this thread's library handle (cuDNN's allocates device memory, which a
// capture refuses and which would cost the graph its capture). Set by a device's kernel
// registration; most ops have none.
using CapturePreparer = void (*)(const KernelContext&);
// Sets op's preparer (nullptr: none) and returns the one it replaces.
CapturePreparer set_capture_preparer(OpId op, CapturePreparer fn);
// Runs the preparer of the op named `op` (a trace node's name), if it has one, with the
// context its kernel will be captured with. Called by the CUDA graph builder before it
// captures each node; throws what the preparer throws.
void prepare_capture(std::string_view op, const KernelContext& ctx);

// The storages of a kernel that runs as a host function on a GPU (a test's fake): when it
// runs it inherits the failures of its reads, and an exception it throws fails its writes,
// as the engine does for a CPU task but in the device's stream order.
struct HostKernelIo {
  Storage* storages[Engine::kMaxStorages] = {};
  uint8_t num_reads = 0, num_writes = 0;
  const char* op = "";
  Site site;
  HostKernelIo(std::initializer_list<Storage*> reads, std::initializer_list<Storage*> writes,
               const char* op, Site site);
  bool inherit_failure() const;  // true (writes poisoned) when a read failed
  void fail(const char* what) const;
  // A GPU kernel takes its addresses when it is launched, or captured into a CUDA graph:
  // a slot rebound after that (trace/cuda/device_loop.cpp binds a loop body's slots per
  // captured iteration) does not move it. take_addresses() notes the slots' addresses at
  // launch; an AtLaunch in the host function puts them back while it runs. A fake's
  // approximation: the rebinding is visible to the host for that time, so host code that
  // reads those slots meanwhile (a node-by-node launch of the same loop body by another
  // thread, in verify mode) can see the launch-time binding.
  void take_addresses();
  struct AtLaunch {
    explicit AtLaunch(const HostKernelIo& io);
    ~AtLaunch();
    AtLaunch(const AtLaunch&) = delete;
    AtLaunch& operator=(const AtLaunch&) = delete;
    const HostKernelIo& io;
    void* moved[Engine::kMaxStorages] = {};  // the slot's binding now, where it moved
    bool was_moved[Engine::kMaxStorages] = {};
  };
  void* at_launch[Engine::kMaxStorages] = {};  // slots only, after take_addresses()
};

// Runs fn as a host function in ctx's stream order.
void run_on_host(const KernelContext& ctx, std::function<void()> fn);

// Queues the entry on the calling thread's current stream of `device`: the task reads and
// writes the listed storages and calls the device's implementation with (ctx, args, x).
// The task (and a failure of it) is named `name` when given, a string literal that
// outlives it (the one-hot rows of a loss fail as "[cross_entropy]"), else by the op.
template <class Args, class Extra>
void queue(OpId op, Device device, std::initializer_list<Storage*> reads,
           std::initializer_list<Storage*> writes, KernelFn<Args, Extra> cpu, const Args& args,
           const Extra& x, Site site, const char* name = nullptr) {
  bool on_host = false;
  KernelFn<Args, Extra> fn = select(op, device, cpu, &on_host);
  if (!name) name = op_name(op);
  if (on_host) [[unlikely]] {
    HostKernelIo io(reads, writes, name, site);
    Engine::get().submit(
        device, name, reads, writes,
        [fn, args, x, io](const KernelContext& ctx) {
          HostKernelIo launched = io;
          launched.take_addresses();
          run_on_host(ctx, [fn, args, x, io = launched] {
            if (io.inherit_failure()) return;
            HostKernelIo::AtLaunch addresses(io);
            try {
              fn(cpu_kernel_context(), args, x);
            } catch (const std::exception& e) {
              io.fail(e.what());
            }
          });
        },
        site);
    return;
  }
  Engine::get().submit(
      device, name, reads, writes, [fn, args, x](const KernelContext& ctx) { fn(ctx, args, x); },
      site);
}

}  // namespace tide::kernels
