// KernelContext: what a kernel receives when the engine runs its task (docs/architecture.md,
// Engine). The device, the tide stream, and on CUDA the handles of the worker that launches it: one
// set per tide stream, so kernels on different streams never share a workspace. CPU
// kernels need only `device`. Filled by the stream's DeviceStream (core/engine/device_stream.h).
#pragma once

#include <cstddef>

#include "core/device.h"

namespace tide {

namespace cuda {
class DeviceApi;
struct HostFunctions;
}  // namespace cuda

struct KernelContext {
  Device device;
  int stream_id = -1;         // tide stream id; -1 when run inline (synchronous mode)
  void* stream = nullptr;     // cudaStream_t of that tide stream
  void* blas = nullptr;       // cublasLtHandle_t of that stream
  void* workspace = nullptr;  // scratch for cuBLASLt / CUB, this stream's alone
  size_t workspace_bytes = 0;
  cuda::DeviceApi* api = nullptr;  // the device's interface (real CUDA or the recording fake)
  // Set while a CUDA graph captures the kernel (trace/cuda/device_graph.h): host functions it
  // launches are kept here, since a graph runs them on every launch.
  cuda::HostFunctions* host_functions = nullptr;
  // Set while a CUDA graph captures the kernel: use_workspace marks it, and the graph then
  // orders this node after the previous one that used the same workspace.
  bool* workspace_used = nullptr;
};

// The workspace, for a kernel that hands `bytes` of it to a library (cuBLASLt, CUB, cuDNN):
// every such use goes through here. A CUDA graph runs independent nodes at once and they
// share one workspace, so while it captures this marks the node (ctx.workspace_used) for
// ordering; a call that needs no bytes (the algorithm chosen needs none) gets nullptr and
// leaves the node free to run beside the others.
inline void* use_workspace(const KernelContext& ctx, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (ctx.workspace_used) *ctx.workspace_used = true;
  return ctx.workspace;
}

// The context of a kernel run on the CPU outside a stream (the trace executor's nodes).
inline const KernelContext& cpu_kernel_context() {
  static const KernelContext c{Device::cpu()};
  return c;
}

}  // namespace tide
