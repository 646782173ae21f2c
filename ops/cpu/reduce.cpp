// CPU implementation of the reduction entry (ops/reduce_kernels.h). Each output element is
// computed by one thread in a fixed order, and the full sum adds fixed-size blocks in
// order, so results never depend on the thread count. 16-bit sums load widened into double.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/thread_pool.h"
#include "ops/cpu/isa_parallel.h"
#include "ops/cpu/lane_sum.h"
#include "ops/op_util.h"
#include "ops/reduce_kernels.h"

namespace tide::kernels::cpu {

using tide::detail::grain_for;
using tide::detail::isa_parallel_for;

namespace {

template <class T>
using Acc = SumAcc<T>;

// Sums x[0..n) in a fixed order (ops/cpu/lane_sum.h). One serial sum ran at a quarter
// of the memory's rate: a conv's bias gradient, 128 x 32 rows of 784, took 10 ms.
template <class T>
Acc<T> sum_contiguous(const T* x, int64_t n) {
  return lane_sum<Acc<T>>(n, [x](int64_t k) { return Acc<T>(widen(x[k])); });
}

// The same order for x[k] * x[k], each product in the accumulator.
template <class T>
Acc<T> sum_squares_contiguous(const T* x, int64_t n) {
  return lane_sum<Acc<T>>(n, [x](int64_t k) {
    const Acc<T> v = Acc<T>(widen(x[k]));
    return v * v;
  });
}

// max / argmax: NaN wins (first NaN), else the first maximum. 16-bit values compare as
// float (exactly: widening keeps every value).
template <class T, class O>
void max_loops(ReduceKind kind, const T* x, O* y, ReduceGeometry g) {
  using R = compute_t<T>;
  int64_t grain = grain_for(g.n);
  parallel_for(g.outer * g.inner, grain, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      int64_t o = j / g.inner, i = j % g.inner;
      const T* p = x + o * g.n * g.inner + i;
      R best = widen(p[0]);
      int64_t arg = 0;
      for (int64_t k = 1; k < g.n && best == best; ++k) {
        const R v = widen(p[k * g.inner]);
        if (v > best || v != v) {
          best = v;
          arg = k;
        }
      }
      if (kind == ReduceKind::max) y[j] = O(best);
      else y[j] = O(arg);
    }
  });
}

template <class T, class O>
void reduce_loops(ReduceKind kind, const T* x, O* y, ReduceGeometry g) {
  if (kind == ReduceKind::sum || kind == ReduceKind::mean || kind == ReduceKind::sum_squares) {
    const bool squares = kind == ReduceKind::sum_squares;
    double scale = kind == ReduceKind::mean ? 1.0 / double(g.n) : 1.0;
    if (g.outer == 1 && g.inner == 1) {
      // Full reduction: fixed 16K-element blocks summed in parallel, then in order.
      constexpr int64_t kBlock = 16384;
      int64_t blocks = (g.n + kBlock - 1) / kBlock;
      // Up to 1M elements the partial sums fit on the stack (no allocation: a traced
      // replay allocates nothing but its outputs). Beyond, they live in a workspace from
      // the allocator, so they count against its limit; over the limit, this op fails.
      constexpr int64_t kStackBlocks = 64;
      Acc<T> stack_part[kStackBlocks];
      StorageRef ws;
      Acc<T>* part = stack_part;
      if (blocks > kStackBlocks) {
        ws = Allocator::get().workspace(size_t(blocks + 1) * sizeof(Acc<T>), "sum");
        part = static_cast<Acc<T>*>(ws->data());
      }
      std::fill(part, part + blocks, Acc<T>(0));
      parallel_for(blocks, 2, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          int64_t lo = b * kBlock, hi = std::min(g.n, lo + kBlock);
          part[size_t(b)] =
              squares ? sum_squares_contiguous(x + lo, hi - lo) : sum_contiguous(x + lo, hi - lo);
        }
      });
      Acc<T> s = 0;
      for (int64_t b = 0; b < blocks; ++b) s += part[b];
      y[0] =
          kind == ReduceKind::mean ? half_convert<O>(acc_to_double(s) * scale) : half_convert<O>(s);
      return;
    }
    if (squares) throw std::runtime_error("[sum_squares] reduces all elements only");
    int64_t grain = grain_for(g.n * g.inner);
    if (g.inner == 1) {  // rows of n contiguous elements
      parallel_for(g.outer, grain, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          const Acc<T> acc = sum_contiguous(x + o * g.n, g.n);
          y[o] = kind == ReduceKind::mean ? half_convert<O>(acc_to_double(acc) * scale)
                                          : half_convert<O>(acc);
        }
      });
      return;
    }
    // Columns (inner > 1): tasks of up to kColumns adjacent columns of one outer slice, so
    // that a bias gradient (outer 1: one slice of n rows; a GPT's 128 columns are two
    // tasks) spreads over the threads too, compiled for the widest vector ISA (additions
    // only: the same bits on every ISA). Each column still adds its rows in order k = 0,
    // 1, ...: the same bits for any split.
    constexpr int64_t kColumns = 64;
    const int64_t blocks = (g.inner + kColumns - 1) / kColumns;
    const int64_t task_grain = grain_for(g.n * kColumns);
    isa_parallel_for(
        g.outer * blocks, task_grain, [&](int64_t t0, int64_t t1) __attribute__((always_inline)) {
          Acc<T> acc[kColumns];
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t o = t / blocks, i0 = (t % blocks) * kColumns;
            const int64_t w = std::min(kColumns, g.inner - i0);
            const T* base = x + o * g.n * g.inner + i0;
            std::fill(acc, acc + w, Acc<T>(0));
            for (int64_t k = 0; k < g.n; ++k) {
              const T* row = base + k * g.inner;
              for (int64_t i = 0; i < w; ++i) acc[i] += Acc<T>(widen(row[i]));
            }
            O* out = y + o * g.inner + i0;
            for (int64_t i = 0; i < w; ++i)
              out[i] = kind == ReduceKind::mean ? half_convert<O>(acc_to_double(acc[i]) * scale)
                                                : half_convert<O>(acc[i]);
          }
        });
    return;
  }
  max_loops(kind, x, y, g);
}

}  // namespace

template <class T, class O>
void reduce(const KernelContext&, const Reduce<T, O>& a, const NoExtra&) {
  reduce_loops<T, O>(a.kind, a.x.get(), a.y.get(), a.g);
}

#define TIDE_REDUCE(T)                                                                   \
  template void reduce<T, T>(const KernelContext&, const Reduce<T, T>&, const NoExtra&); \
  template void reduce<T, int64_t>(const KernelContext&, const Reduce<T, int64_t>&, const NoExtra&);
TIDE_REDUCE(float)
TIDE_REDUCE(double)
TIDE_REDUCE(int32_t)
template void reduce<bfloat16, bfloat16>(const KernelContext&, const Reduce<bfloat16, bfloat16>&,
                                         const NoExtra&);
template void reduce<float16, float16>(const KernelContext&, const Reduce<float16, float16>&,
                                       const NoExtra&);
template void reduce<bfloat16, int64_t>(const KernelContext&, const Reduce<bfloat16, int64_t>&,
                                        const NoExtra&);
template void reduce<float16, int64_t>(const KernelContext&, const Reduce<float16, int64_t>&,
                                       const NoExtra&);
template void reduce<int64_t, int64_t>(const KernelContext&, const Reduce<int64_t, int64_t>&,
                                       const NoExtra&);

}  // namespace tide::kernels::cpu
