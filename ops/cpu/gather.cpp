// CPU entries of the gather family (ops/gather_kernels.h). Indices are checked before
// anything is written; the engine turns the throw into the op's failure.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "ops/functors.h"
#include "ops/gather_kernels.h"

namespace tide::kernels::cpu {

namespace {
template <class I>
void check_rows(const I* rows, int64_t k, int64_t n) {
  for (int64_t i = 0; i < k; ++i) {
    const int64_t r = int64_t(rows[i]);
    if (r < 0 || r >= n)
      throw std::runtime_error(tide::detail::concat("index ", r, " at position ", i,
                                                    " is outside the ", n, " rows [0, ", n, ")"));
  }
}
}  // namespace

template <class T, class I>
void take_rows(const KernelContext&, const TakeRows<T, I>& a, const NoExtra&) {
  const I* rows = a.rows.get();
  check_rows(rows, a.k, a.n);
  const T* src = a.src.get();
  T* y = a.y.get();
  for (int64_t i = 0; i < a.k; ++i)
    std::memcpy(y + i * a.width, src + int64_t(rows[i]) * a.width, size_t(a.width) * sizeof(T));
}

template <class T, class I>
void scatter_add_rows(const KernelContext&, const ScatterAddRows<T, I>& a, const NoExtra&) {
  const I* rows = a.rows.get();
  check_rows(rows, a.k, a.n);
  const T* g = a.g.get();
  T* y = a.y.get();
  std::fill(y, y + a.n * a.width, T(0));
  for (int64_t i = 0; i < a.k; ++i) {
    T* dst = y + int64_t(rows[i]) * a.width;
    const T* src = g + i * a.width;
    for (int64_t c = 0; c < a.width; ++c) dst[c] = fn::Add{}(dst[c], src[c]);  // wraps for ints
  }
}

#define TIDE_GATHER(T, I)                                                                     \
  template void take_rows<T, I>(const KernelContext&, const TakeRows<T, I>&, const NoExtra&); \
  template void scatter_add_rows<T, I>(const KernelContext&, const ScatterAddRows<T, I>&,     \
                                       const NoExtra&);
#define TIDE_GATHER_ALL(T) TIDE_GATHER(T, int32_t) TIDE_GATHER(T, int64_t)
TIDE_GATHER_ALL(float)
TIDE_GATHER_ALL(double)
TIDE_GATHER_ALL(int32_t)
TIDE_GATHER_ALL(int64_t)
#undef TIDE_GATHER_ALL
// 16-bit rows are moved as they are (ops/gather.cpp); their scatter-add takes float32.
template void take_rows<bfloat16, int32_t>(const KernelContext&, const TakeRows<bfloat16, int32_t>&,
                                           const NoExtra&);
template void take_rows<bfloat16, int64_t>(const KernelContext&, const TakeRows<bfloat16, int64_t>&,
                                           const NoExtra&);
template void take_rows<float16, int32_t>(const KernelContext&, const TakeRows<float16, int32_t>&,
                                          const NoExtra&);
template void take_rows<float16, int64_t>(const KernelContext&, const TakeRows<float16, int64_t>&,
                                          const NoExtra&);
#undef TIDE_GATHER

}  // namespace tide::kernels::cpu
