// OneOpenMpThread: for its lifetime, OpenMP regions started on the calling thread (oneDNN's,
// built on libgomp as Debian's is) run on that thread alone. Used around oneDNN's GEMMs
// (ops/cpu/linalg.cpp, half_gemm.cpp): tide splits the work over its own pool instead, so
// no OpenMP team spins after each call on the cores the pool's next loop needs, and the
// bits do not depend on OpenMP's thread count. The OpenMP calls are looked up at run time
// (libgomp comes with oneDNN) so that tide does not link OpenMP; a oneDNN built on another
// threading runtime has none (available() is false), and then runs its own way. Not a
// public header.
#pragma once

#include <dlfcn.h>

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

}  // namespace tide::kernels::cpu
