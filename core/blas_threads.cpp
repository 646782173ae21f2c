// OpenBLAS's thread count, set once at startup (see blas_threads.h for the rule and why it
// does not follow set_num_threads). The OpenBLAS calls are weak references resolved at run
// time, so a build against another CBLAS still links and simply reports openblas = false.
#include "core/blas_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
char* openblas_get_config(void) __attribute__((weak));
}

namespace tide {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

BlasThreadsInfo configure_once() {
  BlasThreadsInfo info;
  info.openblas = openblas_set_num_threads && openblas_get_num_threads;
  if (!info.openblas) return info;
  if (openblas_get_config) info.config = openblas_get_config();
  info.default_threads = info.threads = openblas_get_num_threads();
  // OpenBLAS reads these itself at load time (OMP_NUM_THREADS only in its OpenMP build,
  // but a user who set it meant something): an explicit choice wins.
  info.from_env = env_set("OPENBLAS_NUM_THREADS") || env_set("GOTO_NUM_THREADS") ||
                  env_set("OMP_NUM_THREADS");
  if (info.from_env) return info;
  int want = std::max(1, std::min(info.default_threads, usable_cores()));
  if (want != info.default_threads) {
    openblas_set_num_threads(want);
    info.threads = openblas_get_num_threads();
  }
  return info;
}

}  // namespace

BlasThreadsInfo configure_blas_threads() {
  static const BlasThreadsInfo first = configure_once();  // thread-safe, once
  BlasThreadsInfo now = first;
  if (now.openblas) now.threads = openblas_get_num_threads();
  return now;
}

namespace {
// At load, so the first GEMM already runs with the count tide chose, pool or no pool.
[[maybe_unused]] const BlasThreadsInfo kAtLoad = configure_blas_threads();
}  // namespace

}  // namespace tide
