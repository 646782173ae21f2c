#include "trace/cuda/device_fusion.h"

#include <cstring>
#include <vector>

#include "core/engine/capture.h"
#include "core/error.h"
#include "ops/chain_compiler.h"
#include "ops/chain_source.h"
#include "ops/creation.h"
#include "ops/kernel_entry.h"
#include "trace/cuda/device_graph.h"

namespace tide::trace {

namespace {

// The chain's NVRTC-compiled kernel on a CUDA device, or nullptr and why not.
const void* compiled_kernel(const std::vector<kernels::ChainStep>& steps, DType dtype,
                            Device device, std::string* why) {
  if (kernels::detail::runs_host_kernels(device)) {
    *why = "a host-kernel fake device runs chains on the host";
    return nullptr;
  }
  if (!kernels::compiled_chains_enabled()) {
    *why = "compiled chains are switched off (TIDE_CUDA_NVRTC=0 or set_compiled_chains_enabled)";
    return nullptr;
  }
  kernels::detail::ensure_cuda_kernels();
  if (!kernels::cuda_chain_kernel) {
    *why = "this build has no CUDA kernels";
    return nullptr;
  }
  std::string source;
  try {
    source = kernels::chain_kernel_source(steps, dtype);
  } catch (const Error& e) {  // a chain the interpreter runs but the writer refuses
    *why = e.what();
    return nullptr;
  }
  return kernels::cuda_chain_kernel(source, device.index, why);
}

}  // namespace

std::shared_ptr<DeviceChain> upload_chain(
    const BoundChain& fk, Device device,
    const std::unordered_map<const Storage*, void*>& redirect) {
  const std::vector<kernels::ChainStep> steps = fk.at_addresses(redirect);
  auto chain = std::make_shared<DeviceChain>();
  std::vector<int64_t> words((steps.size() * sizeof(kernels::ChainStep) + 7) / 8);
  std::memcpy(words.data(), steps.data(), steps.size() * sizeof(kernels::ChainStep));
  {
    tide::detail::CapturePause pause;  // an upload, also while a trace records
    chain->program = from_vector(words, Shape({int64_t(words.size())}), device);
    chain->program.wait_to_read();
  }
  chain->args.steps = static_cast<const kernels::ChainStep*>(chain->program.storage()->data());
  chain->args.num_steps = int(steps.size());
  chain->args.n = fk.n;
  chain->args.dtype = fk.dtype;
  chain->args.compiled = compiled_kernel(steps, fk.dtype, device, &chain->interpreted_because);
  return chain;
}

void launch_chain(const KernelContext& ctx, const kernels::FusedChain& c) {
  if (kernels::detail::runs_host_kernels(ctx.device)) {
    kernels::run_on_host(ctx, [c] { kernels::cpu::fused_chain(cpu_kernel_context(), c, {}); });
    return;
  }
  kernels::detail::ensure_cuda_kernels();
  auto fn = kernels::CudaKernel<kernels::FusedChain, kernels::NoExtra>::fn;
  if (!fn) throw std::runtime_error("fused chains have no CUDA kernel in this build");
  fn(ctx, c, {});
}

void prepare_device_fusion(Graph& g) {
  for (Node& n : g.nodes) {
    if (n.piece) n.piece->prepare_chains(&g.compiled_chains, &g.chain_fallback);
    if (!n.fused) continue;
    std::shared_ptr<DeviceChain> chain = upload_chain(*n.fused, g.device);
    if (chain->args.compiled) ++g.compiled_chains;
    else g.chain_fallback = chain->interpreted_because;
    n.kernel = [chain](const KernelContext& ctx) { launch_chain(ctx, chain->args); };
  }
}

}  // namespace tide::trace
