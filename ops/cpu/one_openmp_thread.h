// OneOpenMpThread: for its lifetime, OpenMP regions started on the calling thread (oneDNN's,
// built on libgomp as Debian's is) run on that thread alone. Used around oneDNN's GEMMs
// (ops/cpu/linalg.cpp, half_gemm.cpp), which tide splits into row parts over its own pool
// instead (for_onednn_row_parts), so no OpenMP team spins after each call on the cores the
// pool's next loop needs, and the bits do not depend on OpenMP's thread count. The OpenMP calls are
// looked up at run time (libgomp comes with oneDNN) so that tide does not link OpenMP; a oneDNN
// built on another threading runtime has none (available() is false), and then runs its own way.
// Not a public header.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>

#include "core/blas_threads.h"
#include "core/thread_pool.h"
#include "ops/cpu/blas_gemm.h"

namespace tide::kernels::cpu {

class OneOpenMpThread {
 public:
  OneOpenMpThread() {
    if (available()) {
      before_ = fns().get();
      fns().set(1);
    }
  }
  ~OneOpenMpThread() {
    if (before_ > 0) fns().set(before_);
  }
  OneOpenMpThread(const OneOpenMpThread&) = delete;
  OneOpenMpThread& operator=(const OneOpenMpThread&) = delete;

  // Whether the process has OpenMP's thread calls (a libgomp-based oneDNN loaded them).
  static bool available() { return fns().set && fns().get; }

 private:
  struct Fns {
    void (*set)(int) = nullptr;
    int (*get)() = nullptr;
  };
  static const Fns& fns() {
    static const Fns f{reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads")),
                       reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"))};
    return f;
  }
  int before_ = 0;
};

// Calls part(r0, rows) over C's m rows in parts, each on one pool thread with oneDNN serial
// there (OneOpenMpThread): one part per core found at startup (usable_cores), at least 32
// rows each; one part for products under kSmallGemm multiply-adds (ops/cpu/blas_gemm.h:
// OpenBLAS also keeps those on the caller) and where the process has no OpenMP calls
// (oneDNN then runs its own threads). The parts depend only on the shape and the machine, never on
// the pool's size: with fewer threads the same parts run one after another, with the same bits.
template <class F>
void for_onednn_row_parts(int64_t m, int64_t n, int64_t k, F&& part) {
  constexpr int64_t kMinRows = 32;
  static const int64_t cores = OneOpenMpThread::available() ? usable_cores() : 1;
  const int64_t parts = m * n * k < kSmallGemm ? 1 : std::clamp<int64_t>(m / kMinRows, 1, cores);
  const int64_t rows = (m + parts - 1) / parts;
  auto run = [&](int64_t p) {
    const int64_t r0 = p * rows, mr = std::min(m, r0 + rows) - r0;
    if (mr <= 0) return;
    const OneOpenMpThread serial;
    part(r0, mr);
  };
  if (parts == 1) return run(0);
  parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) run(p);
  });
}

}  // namespace tide::kernels::cpu
