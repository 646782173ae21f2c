// The reduction family's kernel entry (ops/kernel_entry.h). A reduction views its input as
// [outer, n, inner] and reduces n; a full reduction is outer = inner = 1. Results never
// depend on scheduling (CPU: fixed blocks summed in order; CUDA: CUB, no atomics). CPU
// implementation in ops/cpu/reduce.cpp, CUDA's in ops/cuda/reduce.cu.
#pragma once

#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

enum class ReduceKind : uint8_t { sum, mean, max, argmax };

struct ReduceGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

// y[o * inner + i] = reduce over k < n of x[(o * n + k) * inner + i]. Sums accumulate in
// double (floating) or int64; max and argmax: the first NaN wins, else the first maximum.
// O is T, or int64 (argmax, integer sums).
template <class T, class O>
struct Reduce {
  DataRef<T> x;
  DataRef<O> y;
  ReduceGeometry g;
  ReduceKind kind = ReduceKind::sum;
};

namespace cpu {
template <class T, class O>
void reduce(const KernelContext&, const Reduce<T, O>&, const NoExtra&);
}

}  // namespace tide::kernels
