// The types of the kernel-entry seam (ops/kernel_entry.h) that kernel files need: light
// enough for nvcc (no engine headers).
#pragma once

#include "core/kernel_context.h"

namespace tide::kernels {

template <class Args, class Extra>
using KernelFn = void (*)(const KernelContext&, const Args&, const Extra&);

// An entry's CUDA implementation, set when the CUDA kernels are registered (once, before
// the first op on a GPU); null in builds without CUDA and for entries CUDA lacks.
template <class Args, class Extra>
struct CudaKernel {
  static inline KernelFn<Args, Extra> fn = nullptr;
};

// The Extra of entries that need none.
struct NoExtra {};

}  // namespace tide::kernels
