// Which GEMM library decides the textbook MLP step: the five large SGEMMs of one
// step (bench_mlp.cpp explains them) in every candidate library this machine has, with all
// cores and with 1 thread, next to the machine's FMA peak measured by a register-only loop.
//
// The cblas libraries and oneDNN are opened with dlopen at run time, each in its own forked
// child, so one binary compares libraries that export the same symbols (OpenBLAS pthread /
// OpenMP / serial, BLIS pthread / OpenMP, ATLAS) without any of them at build time, and no
// library's idle threads run during another's measurement. libxsmm and Eigen have no shared
// library (static archive / headers) and are compiled in when CMake found them.
//
// Each library: a spot check against a double-precision dot product (a wrong transpose flag
// fails it), two warm-up rounds, then rounds of the five GEMMs; per shape and for the
// 5-GEMM total the median over the rounds, then over the passes (see main). Not measured:
// dgemm, small shapes, tide itself (BM_TextbookGemmFloor in tide_bench calls tide's linked
// BLAS the way the step does).
//
//   tide_bench_gemm_libs [--threads N] [--passes P] [--min-time S] [--only NAME[,NAME...]]
// (defaults: all cores, 5 passes, 0.4 s per library and pass; names as in the table).
#include <dlfcn.h>
#include <immintrin.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if TIDE_GEMM_LIBS_OPENMP
#include <omp.h>
#endif
#if TIDE_GEMM_LIBS_XSMM
#include <libxsmm.h>
#endif
#if TIDE_GEMM_LIBS_EIGEN
#include <Eigen/Core>
#endif

#ifndef TIDE_LIBDIR  // Debian's multiarch library folder; CMake passes the real one
#define TIDE_LIBDIR "/usr/lib/x86_64-linux-gnu"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int m, n, k;
  bool ta, tb;  // row-major, as tide calls cblas: A is (k x m) when ta, B is (n x k) when tb
  double gflop() const { return 2.0 * m * n * k / 1e9; }
};

// The step's five large GEMMs (M x N x K), tide's layout (bench_mlp.cpp).
const Shape kShapes[] = {
    {"fwd1 X W1", 1024, 2048, 512, false, false},   {"fwd2 A1 W2", 1024, 512, 2048, false, false},
    {"dW2 A1^T dZ2", 2048, 512, 1024, true, false}, {"dA1 dZ2 W2^T", 1024, 2048, 512, false, true},
    {"dW1 X^T dZ1", 512, 2048, 1024, true, false},
};
constexpr int kNumShapes = int(std::size(kShapes));

// Row-major C = op(A) op(B), alpha 1, beta 0; lda/ldb/ldc are the stored rows' lengths.
using Sgemm = std::function<void(const Shape&, const float* a, int lda, const float* b, int ldb,
                                 float* c, int ldc)>;

// ---- peak: FMAs on registers only -------------------------------------------------------

// 16 independent accumulators hide the FMA latency (4 cycles) on two FMA ports.
__attribute__((target("avx512f"))) double fma_loop_avx512(long iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  _mm512_storeu_ps(lanes, s);
  double sum = 0;
  for (float v : lanes) sum += v;
  return sum + 2.0 * 16 * 16 * double(iters);  // + the flops, see peak_gflops
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  double sum = 0;
  for (float v : lanes) sum += v;
  return sum + 2.0 * 8 * 12 * double(iters);
}

// GFLOP/s of `threads` threads each running the loop; the median of 5 tries of ~0.1-0.3 s.
double peak_gflops(bool avx512, int threads) {
  const long iters = 50'000'000;
  std::vector<double> tries;
  for (int t = 0; t < 5; ++t) {
    std::vector<double> flops(threads);
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        double r = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
        flops[i] = std::floor(r / 1e6) * 1e6;  // drop the accumulators' sum (< 1e6)
      });
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0;
    for (double f : flops) total += f;
    tries.push_back(total / s / 1e9);
  }
  std::sort(tries.begin(), tries.end());
  return tries[tries.size() / 2];
}

// ---- the libraries ----------------------------------------------------------------------

struct Lib {
  std::string name;
  // In the child: loads the library, sets `threads`, returns the GEMM (empty when absent)
  // and a line saying what was loaded.
  std::function<Sgemm(int threads, std::string& info)> open;
};

// Thread counts through the environment too: OpenMP runtimes and BLIS read it at load.
void set_thread_env(int threads) {
  std::string n = std::to_string(threads);
  for (const char* v : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"})
    setenv(v, n.c_str(), 1);
}

template <class F>
F sym(void* h, const char* name) {
  return reinterpret_cast<F>(dlsym(h, name));
}

// Whatever OpenMP runtime `h` brought in (dlsym also searches its dependencies).
void omp_threads(void* h, int threads) {
  if (auto f = sym<void (*)(int)>(h, "omp_set_num_threads")) f(threads);
}

// CBLAS enum values (cblas.h): RowMajor 101, NoTrans 111, Trans 112.
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);

Sgemm cblas_from(void* h) {
  auto f = sym<CblasSgemm>(h, "cblas_sgemm");
  if (!f) return {};
  return [f](const Shape& s, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
    f(101, s.ta ? 112 : 111, s.tb ? 112 : 111, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  };
}

Lib openblas(const char* variant) {
  std::string path = std::string(TIDE_LIBDIR "/openblas-") + variant + "/libopenblas.so.0";
  const bool serial = std::string(variant) == "serial";
  return {std::string("openblas-") + variant,
          [path, serial](int threads, std::string& info) -> Sgemm {
            if (serial && threads != 1) {
              info = "serial build: 1 thread only";
              return {};
            }
            set_thread_env(threads);
            void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!h) return {};
            if (auto set = sym<void (*)(int)>(h, "openblas_set_num_threads")) set(threads);
            omp_threads(h, threads);
            auto cfg = sym<char* (*)()>(h, "openblas_get_config");
            auto core = sym<char* (*)()>(h, "openblas_get_corename");
            auto get = sym<int (*)()>(h, "openblas_get_num_threads");
            info = std::string(cfg ? cfg() : "?") + "; core " + (core ? core() : "?") +
                   "; threads " + std::to_string(get ? get() : -1);
            return cblas_from(h);
          }};
}

// arch: "" lets BLIS detect the CPU; a name ("skx") forces its kernels through
// BLIS_ARCH_TYPE, for CPUs it misdetects (a KVM guest whose brand string has no SKU).
Lib blis(const char* variant, const char* arch = "") {
  std::string path = std::string(TIDE_LIBDIR "/blis-") + variant + "/libblis.so.4";
  std::string name = std::string("blis-") + variant + (*arch ? "+" : "") + arch;
  std::string forced = arch;
  return {name, [path, forced](int threads, std::string& info) -> Sgemm {
            set_thread_env(threads);
            if (!forced.empty()) setenv("BLIS_ARCH_TYPE", forced.c_str(), 1);
            void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!h) return {};
            if (auto set = sym<void (*)(long)>(h, "bli_thread_set_num_threads")) set(threads);
            omp_threads(h, threads);
            auto ver = sym<char* (*)()>(h, "bli_info_get_version_str");
            auto arch_id = sym<int (*)()>(h, "bli_arch_query_id");
            auto arch_name = sym<char* (*)(int)>(h, "bli_arch_string");
            auto get = sym<long (*)()>(h, "bli_thread_get_num_threads");
            info = std::string("BLIS ") + (ver ? ver() : "?") + "; arch " +
                   (arch_id && arch_name ? arch_name(arch_id()) : "?") + "; threads " +
                   std::to_string(get ? get() : -1);
            return cblas_from(h);
          }};
}

// ATLAS as Debian ships it (libatlas3-base): generic, serial.
Lib atlas() {
  return {"atlas", [](int threads, std::string& info) -> Sgemm {
            if (threads != 1) {
              info = "serial build: 1 thread only";
              return {};
            }
            void* h = dlopen(TIDE_LIBDIR "/libcblas.so.3", RTLD_NOW | RTLD_LOCAL);
            if (!h) return {};
            info = "ATLAS (libcblas.so.3), serial";
            return cblas_from(h);
          }};
}

// oneDNN's dnnl_sgemm: row-major, char transposes, 64-bit sizes; OpenMP threads.
Lib onednn() {
  return {"onednn", [](int threads, std::string& info) -> Sgemm {
            set_thread_env(threads);
            void* h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
            if (!h) return {};
            omp_threads(h, threads);
            struct Version {  // dnnl_version_t
              int major, minor, patch;
              const char* hash;
              unsigned cpu_runtime, gpu_runtime;
            };
            if (auto v = sym<const Version* (*)()>(h, "dnnl_version")())
              info = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                     std::to_string(v->patch) + " cpu_runtime " + std::to_string(v->cpu_runtime);
            using F = int (*)(char, char, long, long, long, float, const float*, long, const float*,
                              long, float, float*, long);
            auto f = sym<F>(h, "dnnl_sgemm");
            if (!f) return {};
            return [f](const Shape& s, const float* a, int lda, const float* b, int ldb, float* c,
                       int ldc) {
              if (f(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f,
                    c, ldc) != 0)
                std::abort();  // dnnl_success is 0; a benchmark, not the library
            };
          }};
}

// Intel oneMKL through its single dynamic library (PyPI's `mkl` wheel, or any install):
// libmkl_rt.so.3 from TIDE_MKL_LIBDIR, else from the loader's path. Its GNU threading layer
// runs on libgomp, as OpenBLAS's OpenMP build does; MKL_THREADING_LAYER set by the caller wins.
Lib mkl() {
  return {"mkl", [](int threads, std::string& info) -> Sgemm {
            set_thread_env(threads);
            setenv("MKL_NUM_THREADS", std::to_string(threads).c_str(), 1);
            setenv("MKL_THREADING_LAYER", "GNU", 0);
            const char* dir = std::getenv("TIDE_MKL_LIBDIR");
            std::string path = dir ? std::string(dir) + "/libmkl_rt.so.3" : "libmkl_rt.so.3";
            void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!h) return {};
            if (auto set = sym<void (*)(int)>(h, "MKL_Set_Num_Threads")) set(threads);
            char version[200] = "?";
            if (auto v = sym<void (*)(char*, int)>(h, "MKL_Get_Version_String"))
              v(version, sizeof version);
            auto get = sym<int (*)()>(h, "MKL_Get_Max_Threads");
            info = std::string(version) + "; layer " + std::getenv("MKL_THREADING_LAYER") +
                   "; threads " + std::to_string(get ? get() : -1);
            return cblas_from(h);
          }};
}

#if TIDE_GEMM_LIBS_XSMM
// libxsmm's OpenMP tiled GEMM (libxsmmext) over its JIT kernels. Column-major: row-major
// C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the operands swap.
Lib xsmm() {
  return {"libxsmm", [](int threads, std::string& info) -> Sgemm {
            omp_set_num_threads(threads);
            libxsmm_init();
            info =
                std::string("libxsmm ") + LIBXSMM_VERSION + "; target " + libxsmm_get_target_arch();
            return [](const Shape& s, const float* a, int lda, const float* b, int ldb, float* c,
                      int ldc) {
              const char ta = s.ta ? 'T' : 'N', tb = s.tb ? 'T' : 'N';
              const libxsmm_blasint m = s.n, n = s.m, k = s.k, la = ldb, lb = lda, lc = ldc;
              const float one = 1, zero = 0;
              libxsmm_sgemm_omp(&tb, &ta, &m, &n, &k, &one, b, &la, a, &lb, &zero, c, &lc);
            };
          }};
}
#endif

#if TIDE_GEMM_LIBS_EIGEN
// Eigen's own GEMM (header-only, OpenMP threads), compiled for this CPU (-march=native).
Lib eigen() {
  return {"eigen", [](int threads, std::string& info) -> Sgemm {
            Eigen::setNbThreads(threads);
            info = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                   std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
                   " " + Eigen::SimdInstructionSetsInUse() + "; threads " +
                   std::to_string(Eigen::nbThreads());
            return [](const Shape& s, const float* a, int lda, const float* b, int ldb, float* c,
                      int ldc) {
              using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
              using Map = Eigen::Map<const M, 0, Eigen::OuterStride<>>;
              Map A(a, s.ta ? s.k : s.m, s.ta ? s.m : s.k, Eigen::OuterStride<>(lda));
              Map B(b, s.tb ? s.n : s.k, s.tb ? s.k : s.n, Eigen::OuterStride<>(ldb));
              Eigen::Map<M, 0, Eigen::OuterStride<>> C(c, s.m, s.n, Eigen::OuterStride<>(ldc));
              if (s.ta) C.noalias() = A.transpose() * B;
              else if (s.tb) C.noalias() = A * B.transpose();
              else C.noalias() = A * B;
            };
          }};
}
#endif

std::vector<Lib> all_libs() {
  std::vector<Lib> libs = {openblas("pthread"),   openblas("openmp"), openblas("serial"),
                           blis("pthread"),       blis("openmp"),     blis("pthread", "skx"),
                           blis("openmp", "skx"), onednn(),           mkl()};
#if TIDE_GEMM_LIBS_XSMM
  libs.push_back(xsmm());
#endif
#if TIDE_GEMM_LIBS_EIGEN
  libs.push_back(eigen());
#endif
  libs.push_back(atlas());
  return libs;
}

// ---- measuring one library (in a child) -------------------------------------------------

struct Result {
  bool ok = false;
  int rounds = 0;
  double ms[kNumShapes] = {};  // median per shape
  double total_ms = 0;         // median of the rounds' 5-GEMM sums
  char info[400] = {};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Operands {
  std::vector<float> a, b, c;
  int lda, ldb, ldc;
};

Operands make_operands(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operands o;
  o.a.resize(size_t(s.m) * s.k);
  o.b.resize(size_t(s.k) * s.n);
  o.c.assign(size_t(s.m) * s.n, 0.0f);
  for (float& v : o.a) v = u(rng);
  for (float& v : o.b) v = u(rng);
  o.lda = s.ta ? s.m : s.k;
  o.ldb = s.tb ? s.k : s.n;
  o.ldc = s.n;
  return o;
}

// 64 entries of C against a double-precision dot product.
bool spot_check(const Shape& s, const Operands& o) {
  std::mt19937 rng(7);
  for (int t = 0; t < 64; ++t) {
    int i = int(rng() % unsigned(s.m)), j = int(rng() % unsigned(s.n));
    double want = 0, mag = 0;
    for (int p = 0; p < s.k; ++p) {
      double x = s.ta ? o.a[size_t(p) * o.lda + i] : o.a[size_t(i) * o.lda + p];
      double y = s.tb ? o.b[size_t(j) * o.ldb + p] : o.b[size_t(p) * o.ldb + j];
      want += x * y;
      mag += std::fabs(x * y);
    }
    if (std::fabs(o.c[size_t(i) * o.ldc + j] - want) > 1e-5 * mag + 1e-6) {
      std::fprintf(stderr, "  spot check failed: %s C[%d][%d] = %g, want %g\n", s.name, i, j,
                   double(o.c[size_t(i) * o.ldc + j]), want);
      return false;
    }
  }
  return true;
}

Result measure(const Lib& lib, int threads, double min_time_s) {
  Result r;
  std::string info;
  Sgemm gemm = lib.open(threads, info);
  std::snprintf(r.info, sizeof r.info, "%s", info.c_str());
  if (!gemm) return r;
  std::mt19937 rng(42);
  std::vector<Operands> ops;
  for (const Shape& s : kShapes) ops.push_back(make_operands(s, rng));
  auto run = [&](int i) {
    Operands& o = ops[i];
    gemm(kShapes[i], o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(), o.ldc);
  };
  for (int i = 0; i < kNumShapes; ++i) {
    run(i);
    if (!spot_check(kShapes[i], ops[i])) return r;
  }
  for (int i = 0; i < kNumShapes; ++i) run(i);  // second warm-up pass
  std::vector<double> per[kNumShapes], totals;
  const auto start = Clock::now();
  // At least 5 rounds and min_time_s, at most 41 rounds.
  while (totals.size() < 5 ||
         (std::chrono::duration<double>(Clock::now() - start).count() < min_time_s &&
          totals.size() < 41)) {
    double sum = 0;
    for (int i = 0; i < kNumShapes; ++i) {
      auto t0 = Clock::now();
      run(i);
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      per[i].push_back(ms);
      sum += ms;
    }
    totals.push_back(sum);
  }
  for (int i = 0; i < kNumShapes; ++i) r.ms[i] = median(per[i]);
  r.total_ms = median(totals);
  r.rounds = int(totals.size());
  r.ok = true;
  return r;
}

// Forks, measures in the child, returns its Result through a pipe.
Result measure_in_child(const Lib& lib, int threads, double min_time_s) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    Result r = measure(lib, threads, min_time_s);
    ssize_t w = write(fd[1], &r, sizeof r);
    _exit(w == ssize_t(sizeof r) ? 0 : 1);
  }
  close(fd[1]);
  Result r;
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = read(fd[0], reinterpret_cast<char*>(&r) + got, sizeof r - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int cores = int(std::thread::hardware_concurrency());
  double min_time_s = 0.4;
  int passes = 5;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--threads") cores = std::atoi(argv[i + 1]);
    else if (flag == "--min-time") min_time_s = std::atof(argv[i + 1]);
    else if (flag == "--passes") passes = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--only") only = std::string(",").append(argv[i + 1]).append(",");
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--passes P] [--min-time S] [--only a,b]\n",
                   argv[0]);
      return 2;
    }
  }
  cores = std::max(1, cores);
  std::vector<int> counts = {cores};
  if (cores > 1) counts.push_back(1);

  std::vector<Lib> libs;
  for (Lib& lib : all_libs())
    if (only.empty() || only.find("," + lib.name + ",") != std::string::npos)
      libs.push_back(std::move(lib));

  // Passes take every (library, threads) in turn, so that a slow minute of this (shared,
  // virtual) machine lowers every library a little instead of one a lot; the table gives
  // the median over passes of each pass's median.
  const bool avx512 = __builtin_cpu_supports("avx512f");
  std::vector<double> peak_tries[2][2];  // [1 thread, all][avx2, avx512]
  std::vector<std::vector<Result>> results(libs.size() * counts.size());
  for (int p = 0; p < passes; ++p) {
    for (int c = 0; c < 2; ++c) {
      int t = c == 0 ? 1 : cores;
      peak_tries[c][0].push_back(peak_gflops(false, t));
      if (avx512) peak_tries[c][1].push_back(peak_gflops(true, t));
    }
    for (size_t l = 0; l < libs.size(); ++l)
      for (size_t c = 0; c < counts.size(); ++c)
        results[l * counts.size() + c].push_back(measure_in_child(libs[l], counts[c], min_time_s));
    std::fprintf(stderr, "pass %d of %d done\n", p + 1, passes);
  }

  std::printf("peak FMA (fp32, registers only), GFLOP/s, median of %d passes:\n", passes);
  double peak[2] = {};  // the best instruction set, 1 thread and all
  for (int c = 0; c < 2; ++c) {
    double p2 = median(peak_tries[c][0]), p5 = avx512 ? median(peak_tries[c][1]) : 0;
    peak[c] = std::max(p2, p5);
    std::printf("  %d thread(s): AVX2 %.1f", c == 0 ? 1 : cores, p2);
    if (avx512) std::printf("  AVX-512 %.1f", p5);
    std::printf("\n");
  }

  double step_gflop = 0;
  for (const Shape& s : kShapes) step_gflop += s.gflop();
  std::printf("\nGFLOP/s per GEMM and the 5-GEMM time (%.2f GFLOP), medians over passes\n",
              step_gflop);
  std::printf("%-18s %3s %6s", "library", "thr", "passes");
  for (const Shape& s : kShapes) std::printf(" %12s", s.name);
  std::printf(" %9s %13s %6s\n", "5-GEMM ms", "(min-max)", "%peak");
  for (size_t l = 0; l < libs.size(); ++l)
    for (size_t c = 0; c < counts.size(); ++c) {
      const int t = counts[c];
      std::vector<double> ms[kNumShapes], totals;
      std::string info = "not found or failed";
      for (const Result& r : results[l * counts.size() + c]) {
        if (r.info[0]) info = r.info;
        if (!r.ok) continue;
        for (int i = 0; i < kNumShapes; ++i) ms[i].push_back(r.ms[i]);
        totals.push_back(r.total_ms);
      }
      std::printf("%-18s %3d ", libs[l].name.c_str(), t);
      if (totals.empty()) {
        std::printf("   n/a  (%s)\n", info.c_str());
        continue;
      }
      std::printf("%6zu", totals.size());
      for (int i = 0; i < kNumShapes; ++i)
        std::printf(" %12.1f", kShapes[i].gflop() / (median(ms[i]) / 1e3));
      double total = median(totals);
      auto [lo, hi] = std::minmax_element(totals.begin(), totals.end());
      std::printf(" %9.2f (%5.1f-%5.1f) %5.1f%%\n", total, *lo, *hi,
                  100.0 * step_gflop / (total / 1e3) / peak[t == 1 ? 0 : 1]);
      std::printf("%-18s     # %s\n", "", info.c_str());
    }
  return 0;
}
