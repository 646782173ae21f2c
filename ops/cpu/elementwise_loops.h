// CPU loops for elementwise ops: contiguous fast paths the compiler vectorises, a general
// broadcasting walk, and the split over the intra-op thread pool. Used by the CPU kernel
// entries (ops/cpu/elementwise.cpp) and the trace's fused blocks. Not a public header.
#pragma once

#include <cstdint>

#include "core/float16.h"
#include "core/shape.h"
#include "core/thread_pool.h"
#include "ops/broadcast.h"
#include "ops/op_util.h"

namespace tide::detail {

// o[i] = f(a[i*sa], b[i*sb]) for i < n, with sa, sb in {0, 1} specialised for vectorising.
// A 16-bit element is converted to float and the result back in the loop (widen, O(...)):
// the conversions are integer bit operations that vectorise with the functor. a and b may
// differ in type: a 16-bit tensor's scalar operand is a float (ScalarFlat).
template <class O, class A, class B, class F>
inline void binary_row(const A* a, int64_t sa, const B* b, int64_t sb, O* o, int64_t n, F f) {
  if (sa == 1 && sb == 1)
    for (int64_t i = 0; i < n; ++i) o[i] = O(f(widen(a[i]), widen(b[i])));
  else if (sa == 1 && sb == 0) {
    const auto bv = widen(*b);
    for (int64_t i = 0; i < n; ++i) o[i] = O(f(widen(a[i]), bv));
  } else if (sa == 0 && sb == 1) {
    const auto av = widen(*a);
    for (int64_t i = 0; i < n; ++i) o[i] = O(f(av, widen(b[i])));
  } else {
    O v = O(f(widen(*a), widen(*b)));
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

// The general broadcasting walk, rows of the last dim split across threads.
template <class O, class T, class F>
void binary_broadcast(const T* a, const T* b, O* o, const kernels::BroadcastGeometry& g, F f) {
  int64_t sa[kMaxDims], sb[kMaxDims];
  g.strides(g.bcast_a, sa);
  g.strides(g.bcast_b, sb);
  int last = g.ndim - 1;
  int64_t len = g.out[last];
  int64_t rows = 1;
  for (int i = 0; i < last; ++i) rows *= g.out[i];
  if (len == 0 || rows == 0) return;
  int64_t grain = std::max<int64_t>(1, kParallelGrain / len);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oa = 0, ob = 0, rem = r;
      for (int i = last - 1; i >= 0; --i) {
        int64_t idx = rem % g.out[i];
        rem /= g.out[i];
        oa += idx * sa[i];
        ob += idx * sb[i];
      }
      binary_row(a + oa, sa[last], b + ob, sb[last], o + r * len, len, f);
    }
  });
}

// Contiguous: a and b each either n elements or one.
template <class O, class A, class B, class F>
void binary_flat(const A* a, int64_t sa, const B* b, int64_t sb, O* o, int64_t n, F f) {
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    binary_row(a + lo * sa, sa, b + lo * sb, sb, o + lo, hi - lo, f);
  });
}

template <class O, class T, class F>
void unary_flat(const T* a, O* o, int64_t n, F f) {
  parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) o[i] = O(f(widen(a[i])));
  });
}

}  // namespace tide::detail
