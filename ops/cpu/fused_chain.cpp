// The CPU entry of a fused chain (ops/fused_chain.h): the interpreter over every element.
// The trace's CPU executor runs its own block-wise FusedKernel; this entry serves the
// device-neutral form where the device runs host kernels (a test's fake GPU).
#include "ops/fused_chain.h"

namespace tide::kernels::cpu {

void fused_chain(const KernelContext&, const FusedChain& c, const NoExtra&) {
  const int64_t iterations = chain::iterations_of(c);
  if (iterations <= 0) return;
  chain::Carried storage;  // as the CUDA kernel does, so the fake GPU runs the same path
  const chain::Carried* carried = chain::carried_for(c, iterations, &storage);
  dispatch_dtype(c.dtype, [&](auto z) {
    using T = decltype(z);
    for (int64_t i = 0; i < c.n; ++i)
      run_chain_element<T>(c.steps, c.num_steps, i, iterations, carried);
  });
}

}  // namespace tide::kernels::cpu
