// The CUDA entry of a fused chain (ops/fused_chain.h): a step-interpreter kernel, one
// thread per element (grid-stride), the chain's registers in the thread's registers; an
// iterated chain (a fused loop) also keeps its loop state there (chain::plan_carried).
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/fused_chain.h"

namespace tide::kernels::cuda {

namespace {

template <class T>
__global__ void fused_chain_kernel(FusedChain c) {
  const int64_t iterations = chain::iterations_of(c);  // a count tensor: read on the device
  if (iterations <= 0) return;
  chain::Carried storage;  // a loop's state in registers (planned once per thread)
  const chain::Carried* carried = chain::carried_for(c, iterations, &storage);
  for (int64_t i = global_index(); i < c.n; i += grid_stride())
    run_chain_element<T>(c.steps, c.num_steps, i, iterations, carried);
}

void fused_chain(const KernelContext& ctx, const FusedChain& c, const NoExtra&) {
  if (c.n == 0) return;
  dispatch_dtype(c.dtype, [&](auto z) {
    using T = decltype(z);
    fused_chain_kernel<T><<<blocks_for(c.n), kThreads, 0, stream_of(ctx)>>>(c);
  });
}

}  // namespace

void register_fused(OpList&) { CudaKernel<FusedChain, NoExtra>::fn = &fused_chain; }

}  // namespace tide::kernels::cuda
