// The CUDA entry of a fused chain (ops/fused_chain.h): the chain's own kernel when NVRTC
// compiled it (ops/chain_compiler.h, FusedChain::compiled), else a step-interpreter kernel,
// one thread per element (grid-stride), the chain's registers in the thread's registers;
// an iterated chain (a fused loop) also keeps its loop state there (chain::plan_carried).
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/cuda/await_grids.h"
#include "core/cuda/check.h"
#include "core/cuda/dependent_launch.h"
#include "ops/chain_compiler.h"
#include "ops/chain_source.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/fused_chain.h"

namespace tide::kernels::cuda {

namespace {

template <class T>
__global__ void fused_chain_kernel(FusedChain c) {
  tide::cuda::await_prerequisite_grids();
  const int64_t iterations = chain::iterations_of(c);  // a count tensor: read on the device
  if (iterations <= 0) return;
  chain::Carried storage;  // a loop's state in registers (planned once per thread)
  const chain::Carried* carried = chain::carried_for(c, iterations, &storage);
  for (int64_t i = global_index(); i < c.n; i += grid_stride())
    run_chain_element<T>(c.steps, c.num_steps, i, iterations, carried);
}

void fused_chain(const KernelContext& ctx, const FusedChain& c, const NoExtra&) {
  if (c.n == 0) return;
  if (c.compiled) {  // kChainKernelName's arguments (ops/chain_source.h)
    const void* steps = c.steps;
    long long n = c.n, iterations = c.iterations;
    const void* count = c.count;
    int count_dtype = int(c.count_dtype);
    void* args[] = {&steps, &n, &iterations, &count, &count_dtype};
    TIDE_CUDA_CHECK(cudaLaunchKernel(c.compiled, dim3(blocks_for(c.n)), dim3(kThreads), args, 0,
                                     stream_of(ctx)));
    return;
  }
  dispatch_with_half(c.dtype, [&](auto z) {
    using T = decltype(z);
    fused_chain_kernel<T><<<blocks_for(c.n), kThreads, 0, stream_of(ctx)>>>(c);
  });
}

// A compiled chain's kernel handle, or why there is none. A library loaded from a CUBIN
// serves every device of its architecture (CUDA loads it into each device's context when
// that context first needs it).
using Loaded = std::pair<const void*, std::string>;

Loaded load_chain(const std::string& source, int sm) {
  const CompiledChain c = compile_chain(source, sm);
  if (!c.error.empty()) return {nullptr, c.error};
  cudaLibrary_t lib = nullptr;
  cudaKernel_t kernel = nullptr;
  cudaError_t e =
      cudaLibraryLoadData(&lib, c.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e == cudaSuccess) e = cudaLibraryGetKernel(&kernel, lib, kChainKernelName);
  if (e == cudaSuccess) {
    tide::cuda::register_awaiting_kernel(kernel);  // its source begins with the wait
    return {reinterpret_cast<const void*>(kernel), ""};
  }
  cudaGetLastError();  // not sticky: nothing ran
  return {nullptr, std::string("loading the compiled chain (sm_") + std::to_string(sm) +
                       "): " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

// Loads kernel into device's context now, not lazily at its first launch there, which may
// be inside a graph capture; and checks that the runtime takes the handle where it takes a
// kernel symbol.
Loaded load_on(const void* kernel, int device) {
  cudaFuncAttributes attr{};
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, kernel);
  cudaSetDevice(current);
  if (e == cudaSuccess) return {kernel, ""};
  cudaGetLastError();
  return {nullptr, "loading the compiled chain on cuda:" + std::to_string(device) + ": " +
                       cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

// A chain's compiled kernel on `device`. Compiled and loaded once per (source,
// architecture), made ready once per device, for the process, failures included (a few KB
// each, like nvcc's own kernels): a retrace, another function or a chain of the same shape
// reuses it.
const void* chain_kernel(const std::string& source, int device, std::string* why) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    *why = "cannot read the compute capability of cuda:" + std::to_string(device);
    return nullptr;
  }
  const int sm = major * 10 + minor;
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, Loaded> by_sm, by_device;
  std::lock_guard<std::mutex> lock(mu);
  auto ready = by_device.find({source, device});
  if (ready == by_device.end()) {
    auto it = by_sm.find({source, sm});
    if (it == by_sm.end())
      it = by_sm.emplace(std::make_pair(source, sm), load_chain(source, sm)).first;
    Loaded r = it->second.first ? load_on(it->second.first, device) : it->second;
    ready = by_device.emplace(std::make_pair(source, device), std::move(r)).first;
  }
  *why = ready->second.second;
  return ready->second.first;
}

}  // namespace

void register_fused(OpList&) {
  CudaKernel<FusedChain, NoExtra>::fn = &fused_chain;
  cuda_chain_kernel = &chain_kernel;
}

}  // namespace tide::kernels::cuda
