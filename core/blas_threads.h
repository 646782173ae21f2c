// OpenBLAS's thread count, chosen once by tide so that GEMMs and the intra-op pool never
// ask for more threads than there are cores, without the user setting OPENBLAS_NUM_THREADS.
//
// The rule (see bench/RESULTS.md, "Threading"): a GEMM and a parallel_for region never run
// at the same time on one stream (the stream's worker calls both), and neither set of
// helpers keeps a core once its work is done (the pool spins ~20 us, OpenBLAS's pthread
// server well under 1 ms), so both may use every core. OpenBLAS is therefore given
// min(cores, its own default) threads once, at startup, and is NOT changed by
// set_num_threads: sgemm's results differ in the last bits between 1 and 2 OpenBLAS
// threads (measured with 0.3.21), and tide's results must not depend on the pool size.
//
// Not done here: per-call thread counts (OpenBLAS has none), and the OpenMP build of
// OpenBLAS, whose thread count follows OMP_NUM_THREADS and whose threads spin per libgomp's
// wait policy (tide links the pthread build; blas_threads_info() says which it found).
#pragma once

#include <string>

namespace tide {

struct BlasThreadsInfo {
  bool openblas = false;   // the OpenBLAS thread-count calls were found at run time
  int threads = 0;         // OpenBLAS's thread count now (0 when unknown)
  int default_threads = 0; // its count before tide changed anything (0 when unknown)
  bool from_env = false;   // OPENBLAS_NUM_THREADS / GOTO_NUM_THREADS / OMP_NUM_THREADS set:
                           // tide left the count as the user chose it
  std::string config;      // openblas_get_config(): version, kernel, threading model
};

// Cores this process may run on: its CPU affinity mask (taskset, cpusets), else
// std::thread::hardware_concurrency(). The intra-op pool's default size and the cap on
// OpenBLAS's threads. CPU quotas (cgroup cpu.max) are not read.
int usable_cores();

// Applies the rule above (once; later calls only report) and says what it found. Called
// by the intra-op pool when it starts; safe from any thread. Does not wait, never throws.
BlasThreadsInfo configure_blas_threads();

}  // namespace tide
