// Registers the CUDA kernel entries (ops/kernel_entry.h) and the ops they implement, once,
// on the first use of a GPU. Each ops/cuda/<family>.cu file registers its own entries.
#include <array>

#include "ops/cuda/registry.h"

namespace tide::kernels::detail {

void register_cuda_kernels(std::array<bool, size_t(OpId::count_)>& ops) {
  cuda::register_elementwise(ops);
  cuda::register_creation(ops);
  cuda::register_reduce(ops);
  cuda::register_matmul(ops);
  cuda::register_rows(ops);
  cuda::register_optim(ops);
  cuda::register_gather(ops);
  cuda::register_conv(ops);
  cuda::register_pool_norm(ops);
  cuda::register_norm(ops);
  cuda::register_attention(ops);
  cuda::register_fused(ops);
  // Ops that need no kernel of their own: views share storage, from_data fills the host
  // then copies (to), and the debug ops run host code on the worker.
  for (OpId id : {OpId::reshape, OpId::slice, OpId::select, OpId::flatten, OpId::from_data,
                  OpId::to, OpId::fail, OpId::gate})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::detail
