// A sum in a fixed order that still vectorises: kLanes running sums (term k goes to lane
// k % kLanes), then the lanes added in order. One serial running sum waits on the adder's
// latency at every term and runs at a fraction of the memory's rate; independent lanes
// let the compiler keep them in vector registers. The order depends only on n, never on
// the thread count. Used by the reductions (ops/cpu/reduce.cpp) and batch norm
// (ops/cpu/pool_norm.cpp).
#pragma once

#include <cstdint>

namespace tide::kernels::cpu {

// The sum of term(k) for k in [0, n), accumulated in Acc.
// always_inline: it inlines into isa_parallel_for's vector-ISA bodies.
template <class Acc, class F>
[[gnu::always_inline]] inline Acc lane_sum(int64_t n, F&& term) {
  constexpr int64_t kLanes = 8;
  Acc lane[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += term(k + l);
  for (int64_t l = 0; k < n; ++k, ++l) lane[l] += term(k);
  Acc s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

}  // namespace tide::kernels::cpu
