// The intra-op thread pool: splits a large kernel over all cores. Fork-join with static
// chunks, so which element a thread computes never changes a result. One parallel region
// at a time: a second caller (another stream's worker) runs its loop inline instead of
// waiting. Helpers wait ~20 us between regions (pausing, then yielding the core), then
// sleep, so they never hold a core while OpenBLAS's threads run the next GEMM.
// OpenBLAS's own thread count is set once at startup (core/blas_threads.h) and does not
// follow set_num_threads.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace tide {

// A non-owning reference to a callable void(int64_t begin, int64_t end).
class RangeFn {
 public:
  template <class F>
  RangeFn(F& f)  // NOLINT: implicit on purpose
      : obj_(&f), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// Calls fn(begin, end) over disjoint ranges covering [0, n), in parallel when n > grain.
// Blocks until all ranges are done. Exceptions thrown by fn propagate to the caller.
void parallel_for_ref(int64_t n, int64_t grain, RangeFn fn);

template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= grain) {
    if (n > 0) fn(int64_t(0), n);
    return;
  }
  parallel_for_ref(n, grain, RangeFn(fn));
}

// Number of threads a parallel region uses (the caller plus helpers). Default: the cores
// this process may run on (its affinity mask, usable_cores()), or TIDE_NUM_THREADS.
// set_num_threads waits for a running region to finish; it does not change OpenBLAS's
// thread count (GEMM results would change in the last bits with it).
int num_threads();
void set_num_threads(int n);

}  // namespace tide
