// The BLAS's thread count, set once at startup (see blas_threads.h for the rule and why it
// does not follow set_num_threads). OpenBLAS's and BLIS's calls are weak references
// resolved at run time, so a build against either (or another CBLAS) links, and the one
// present is the one used.
#include "core/blas_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <thread>

#ifndef TIDE_BLAS_NAME  // CMake sets it from TIDE_BLAS
#define TIDE_BLAS_NAME "openblas"
#endif

extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
char* openblas_get_config(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
// BLIS 0.9: dim_t and gint_t are int64_t; arch_t is an enum.
void bli_thread_set_num_threads(int64_t) __attribute__((weak));
int64_t bli_thread_get_num_threads(void) __attribute__((weak));
char* bli_info_get_version_str(void) __attribute__((weak));
int64_t bli_info_get_enable_openmp(void) __attribute__((weak));
int64_t bli_info_get_enable_pthreads(void) __attribute__((weak));
int bli_arch_query_id(void) __attribute__((weak));
char* bli_arch_string(int) __attribute__((weak));
// oneDNN (-DTIDE_BLAS=onednn: float GEMMs); its dnnl_version_t.
struct TideDnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
const TideDnnlVersion* dnnl_version(void) __attribute__((weak));
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

bool any_env(std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), env_set);
}

bool have_openblas() { return openblas_set_num_threads && openblas_get_num_threads; }
bool have_blis() { return bli_thread_set_num_threads && bli_thread_get_num_threads; }

// BLIS says -1 while nothing set a count: it then runs one thread.
int blis_threads() { return int(std::max<int64_t>(1, bli_thread_get_num_threads())); }

std::string blis_config() {
  std::string c =
      std::string("BLIS ") + (bli_info_get_version_str ? bli_info_get_version_str() : "?");
  if (bli_arch_query_id && bli_arch_string)
    c += std::string(" arch ") + bli_arch_string(bli_arch_query_id());
  if (bli_info_get_enable_openmp && bli_info_get_enable_openmp()) c += " openmp";
  else if (bli_info_get_enable_pthreads && bli_info_get_enable_pthreads()) c += " pthreads";
  else c += " single-threaded";
  return c;
}

BlasThreadsInfo configure_library() {
  BlasThreadsInfo info;
  info.configured = TIDE_BLAS_NAME;
  if (have_openblas()) {
    info.library = "OpenBLAS";
    if (openblas_get_config) info.config = openblas_get_config();
    if (openblas_get_corename) info.config += std::string(" core ") + openblas_get_corename();
    info.default_threads = info.threads = openblas_get_num_threads();
    // OpenBLAS reads these itself at load time (OMP_NUM_THREADS only in its OpenMP build,
    // but a user who set it meant something).
    info.from_env = any_env({"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"});
    if (info.from_env) return info;
    int want = std::max(1, std::min(info.default_threads, usable_cores()));
    if (want != info.default_threads) {
      openblas_set_num_threads(want);
      info.threads = openblas_get_num_threads();
    }
  } else if (have_blis()) {
    info.library = "BLIS";
    // Threads first: that call initialises BLIS, which its arch query (in blis_config)
    // needs when BLIS_ARCH_TYPE is set.
    info.default_threads = info.threads = blis_threads();
    info.config = blis_config();
    // BLIS 0.9 reads BLIS_NUM_THREADS, else OMP_NUM_THREADS, or the per-loop ways.
    info.from_env = any_env({"BLIS_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_JC_NT", "BLIS_PC_NT",
                             "BLIS_IC_NT", "BLIS_JR_NT", "BLIS_IR_NT"});
    if (info.from_env) return info;
    bli_thread_set_num_threads(usable_cores());  // no default of its own: see the header
    info.threads = blis_threads();
  }
  return info;
}

// With -DTIDE_BLAS=onednn, a float GEMM's rows run in parts on tide's pool, one per core
// found at startup, oneDNN serial in each (ops/cpu/linalg.cpp); bfloat16 GEMMs the same way
// (ops/cpu/half_gemm.cpp).
std::string onednn_config() {
  if (!dnnl_version) return "";
  const TideDnnlVersion* v = dnnl_version();
  const std::string version =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  if (std::string(TIDE_BLAS_NAME) == "onednn")
    return "; float GEMMs: oneDNN " + version + " (row parts on tide's pool, one per core)";
  return "; bfloat16 GEMMs: oneDNN " + version + " (row parts on tide's pool, one per core)";
}

BlasThreadsInfo configure_once() {
  BlasThreadsInfo info = configure_library();
  info.config += onednn_config();
  return info;
}

}  // namespace

BlasThreadsInfo configure_blas_threads() {
  static const BlasThreadsInfo first = configure_once();  // thread-safe, once
  BlasThreadsInfo now = first;
  now.threads = blas_num_threads();
  return now;
}

int blas_num_threads() {
  if (have_openblas()) return openblas_get_num_threads();
  if (have_blis()) return blis_threads();
  return 0;
}

bool set_blas_num_threads(int n) {
  if (n < 1) return false;
  if (have_openblas()) openblas_set_num_threads(n);
  else if (have_blis()) bli_thread_set_num_threads(n);
  else return false;
  return true;
}

namespace {
// At load, so the first GEMM already runs with the count tide chose, pool or no pool.
[[maybe_unused]] const BlasThreadsInfo kAtLoad = configure_blas_threads();
}  // namespace

}  // namespace tide
