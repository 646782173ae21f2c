// The registration functions of the CUDA kernel files (ops/cuda/*.cu). Each sets
// CudaKernel<Args, Extra>::fn for its entries and marks the ops it implements in `ops`.
#pragma once

#include <array>
#include <cstddef>

#include "ops/kernel_types.h"
#include "ops/op_traits.h"

namespace tide::kernels::cuda {

using OpList = std::array<bool, size_t(OpId::count_)>;

void register_elementwise(OpList& ops);

}  // namespace tide::kernels::cuda
