// The gather family's kernel entries (ops/kernel_entry.h). CPU implementations in
// ops/cpu/gather.cpp, CUDA's in ops/cuda/gather.cu (Thrust and CUB).
#pragma once

#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// y (k x width) = rows of src (n x width) at rows[0, k).
template <class T, class I>
struct TakeRows {
  DataRef<T> src;
  DataRef<I> rows;
  DataRef<T> y;
  int64_t n = 0, k = 0, width = 0;
};
// y (n x width) = 0, then y[rows[i]] += g[i] (g: k x width) for i in increasing order.
template <class T, class I>
struct ScatterAddRows {
  DataRef<T> g;
  DataRef<I> rows;
  DataRef<T> y;
  int64_t n = 0, k = 0, width = 0;
};

namespace cpu {
template <class T, class I>
void take_rows(const KernelContext&, const TakeRows<T, I>&, const NoExtra&);
template <class T, class I>
void scatter_add_rows(const KernelContext&, const ScatterAddRows<T, I>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
