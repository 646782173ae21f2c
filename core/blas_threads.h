// The BLAS library's thread count, chosen once by tide so that GEMMs and the intra-op pool
// never ask for more threads than there are cores, without the user setting
// OPENBLAS_NUM_THREADS or BLIS_NUM_THREADS. The library is chosen at configure time
// (cmake/Blas.cmake, TIDE_BLAS: openblas or blis); this file finds its thread calls at run
// time.
//
// The rule (see bench/RESULTS.md, "Threading"): a GEMM and a parallel_for region never run
// at the same time on one stream (the stream's worker calls both), and neither set of
// helpers keeps a core once its work is done (the pool spins ~20 us, OpenBLAS's pthread
// server well under 1 ms), so both may use every core. The BLAS is therefore given
// min(cores, its own default) threads once, at startup, and is NOT changed by
// set_num_threads: sgemm's results differ in the last bits between 1 and 2 OpenBLAS
// threads (measured with 0.3.21), and tide's results must not depend on the pool size.
// "Its own default": OpenBLAS's count at load (the CPUs it saw, capped by its build).
// BLIS has none: unset, it runs one thread only because nobody asked, so it gets every
// usable core.
//
// An explicit choice in the environment wins and is left alone: OPENBLAS_NUM_THREADS,
// GOTO_NUM_THREADS, OMP_NUM_THREADS (OpenBLAS); BLIS_NUM_THREADS, OMP_NUM_THREADS and the
// per-loop BLIS_{JC,PC,IC,JR,IR}_NT (BLIS).
//
// Not done here: per-call thread counts (neither library's CBLAS has them), and the OpenMP
// builds' spinning: their threads wait per libgomp's OMP_WAIT_POLICY / GOMP_SPINCOUNT after
// each GEMM (Debian's default BLIS is its OpenMP build; tide's default OpenBLAS is the
// pthread build). `config` says which build was found.
#pragma once

#include <string>

namespace tide {

struct BlasThreadsInfo {
  std::string configured;   // TIDE_BLAS at configure time: "openblas", "blis" or "onednn"
                            // (float GEMMs through oneDNN, in row parts on tide's pool; the
                            // counts below are then OpenBLAS's, for double GEMMs)
  std::string library;      // whose thread calls were found at run time: "OpenBLAS", "BLIS",
                            // or empty (another CBLAS: tide leaves its threads alone)
  int threads = 0;          // the library's thread count now (0 when unknown)
  int default_threads = 0;  // its count before tide changed anything (0 when unknown; BLIS
                            // unset: 1)
  bool from_env = false;    // a variable listed above was set: tide left the count as is
  std::string config;       // OpenBLAS: openblas_get_config() and core; BLIS: version, the
                            // kernel set it picked (bli_arch) and its threading model; then
                            // "; float GEMMs: oneDNN x.y.z" (TIDE_BLAS=onednn) or
                            // "; bfloat16 GEMMs: oneDNN x.y.z" when only those use it
};

// Cores this process may run on: its CPU affinity mask (taskset, cpusets), else
// std::thread::hardware_concurrency(). The intra-op pool's default size and the cap on
// the BLAS's threads. CPU quotas (cgroup cpu.max) are not read.
int usable_cores();

// Applies the rule above (once; later calls only report) and says what it found. Called
// by the intra-op pool when it starts; safe from any thread. Does not wait, never throws.
BlasThreadsInfo configure_blas_threads();

// The BLAS's thread count now; 0 when tide found no thread calls.
int blas_num_threads();

// Sets the BLAS's thread count, for benchmarks and experiments that compare counts; tide
// never calls it after startup. Products may change in the last bits (see the rule above).
// Returns false and does nothing when tide found no thread calls or n < 1.
bool set_blas_num_threads(int n);

}  // namespace tide
