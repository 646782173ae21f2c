// The reduction family's kernel entry (ops/kernel_entry.h). A reduction views its input as
// [outer, n, inner] and reduces n; a full reduction is outer = inner = 1. Results never
// depend on scheduling (CPU: fixed blocks summed in order; CUDA: CUB, no atomics). CPU
// implementation in ops/cpu/reduce.cpp, CUDA's in ops/cuda/reduce.cu.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/float16.h"
#include "core/host_device.h"
#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// sum_squares: the sum of x * x, each square taken in the accumulator (full reductions
// of floating tensors only; the front-end makes no other).
enum class ReduceKind : uint8_t { sum, mean, max, argmax, sum_squares };

struct ReduceGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

// What a sum accumulates in: double for floating types; for integers uint64_t, where a
// sum that passes the range wraps around (two's complement, as NumPy's and PyTorch's do)
// instead of being undefined behaviour; converting it to the output type wraps likewise.
template <class T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T> || is_half_v<T>, double, uint64_t>;
// An accumulator as a double (a mean): an integer one is read as signed.
template <class A>
TIDE_HOST_DEVICE double acc_to_double(A s) {
  if constexpr (std::is_unsigned_v<A>) return double(int64_t(s));
  else return double(s);
}

// y[o * inner + i] = reduce over k < n of x[(o * n + k) * inner + i]. Sums accumulate in
// double (floating, 16-bit included: loaded widened) or int64; max and argmax: the first
// NaN wins, else the first maximum (16-bit values compared as float). A result is stored
// with half_convert (core/float16.h): a 16-bit sum through float, so it has the bits of the
// float32 sum then cast; an integer sum wraps as above.
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
