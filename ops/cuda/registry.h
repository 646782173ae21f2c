// The registration functions of the CUDA kernel files (ops/cuda/*.cu). Each sets
// CudaKernel<Args, Extra>::fn for its entries and marks the ops it implements in `ops`.
#pragma once

#include <array>
#include <cstddef>

#include "ops/kernel_types.h"
#include "ops/op_traits.h"

namespace tide::kernels::cuda {

using OpList = std::array<bool, size_t(OpId::count_)>;

void register_elementwise(OpList& ops);  // elementwise.cu
void register_creation(OpList& ops);     // creation.cu
void register_reduce(OpList& ops);       // reduce.cu
void register_matmul(OpList& ops);       // matmul.cu
void register_rows(OpList& ops);         // rows.cu
void register_optim(OpList& ops);        // optim.cu
void register_gather(OpList& ops);       // gather.cu
void register_conv(OpList& ops);         // conv.cu: convolutions through cuDNN
void register_pool_norm(OpList& ops);    // pool_norm.cu: pooling and batch norm
void register_norm(OpList& ops);         // norm.cu: layer norm
void register_attention(OpList& ops);    // attention.cu: fused scaled dot-product attention
void register_fused(OpList& ops);        // fused.cu: a trace's fused chains (no op of its own)

}  // namespace tide::kernels::cuda
