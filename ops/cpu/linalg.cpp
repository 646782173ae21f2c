// CPU implementations of the linear-algebra entries (ops/linalg_kernels.h). The GEMM casts
// its sizes to int for CBLAS: the front-ends (ops/linalg.cpp) refuse sizes past 2^31 - 1.
#include <cblas.h>

#include "ops/linalg_kernels.h"
#if TIDE_SGEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "ops/cpu/one_openmp_thread.h"
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "core/blas_threads.h"
#include "core/float16.h"
#include "core/thread_pool.h"
#include "ops/cpu/blas_gemm.h"
#include "ops/cpu/gelu_rows.h"
#include "ops/cpu/half_gemm.h"
#include "ops/op_util.h"

namespace tide::kernels::cpu {

using tide::detail::grain_for;
using tide::detail::kParallelGrain;

namespace {
// Checked before anything is written; the engine turns the throw into the op's failure.
template <class L>
void check_labels(const L* labels, int64_t rows, int64_t classes) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t v = int64_t(labels[r]);
    if (v < 0 || v >= classes)
      throw std::runtime_error(tide::detail::concat("label ", v, " of row ", r, " is outside the ",
                                                    classes, " classes [0, ", classes, ")"));
  }
}
}  // namespace

template <class T, class L>
void cross_entropy_rows(const KernelContext&, const CrossEntropyRows<T, L>& c, const NoExtra&) {
  using R = compute_t<T>;
  const T* x = c.x.get();
  const L* labels = c.labels.get();
  T* loss = c.loss.get();
  R* lse = c.lse.get();
  const int64_t n = c.classes;
  check_labels(labels, c.rows, n);
  int64_t grain = grain_for(n);
  parallel_for(c.rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * n;
      R m = widen(xr[0]);
      for (int64_t i = 1; i < n; ++i) m = widen(xr[i]) > m ? widen(xr[i]) : m;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(double(widen(xr[i]) - m));
      const double ls = double(m) + std::log(sum);
      lse[r] = R(ls);
      loss[r] = half_convert<T>(ls - double(widen(xr[labels[r]])));
    }
  });
}

template <class T, class L>
void cross_entropy_grad(const KernelContext&, const CrossEntropyGrad<T, L>& c, const NoExtra&) {
  using R = compute_t<T>;
  const T *x = c.x.get(), *g = c.g.get();
  const R* lse = c.lse.get();
  const L* labels = c.labels.get();
  T* dx = c.dx.get();
  const int64_t n = c.classes;
  check_labels(labels, c.rows, n);
  int64_t grain = grain_for(n);
  parallel_for(c.rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * n;
      T* dr = dx + r * n;
      const double l = double(lse[r]), gr = double(widen(g[r]));
      for (int64_t i = 0; i < n; ++i)
        dr[i] = half_convert<T>(std::exp(double(widen(xr[i])) - l) * gr);
      dr[labels[r]] = half_convert<T>((std::exp(double(widen(xr[labels[r]])) - l) - 1.0) * gr);
    }
  });
}

template <class T, class L>
void one_hot_rows(const KernelContext&, const OneHotRows<T, L>& o, const NoExtra&) {
  const L* labels = o.labels.get();
  T* y = o.y.get();
  const int64_t rows = o.rows, classes = o.classes;
  check_labels(labels, rows, classes);
  int64_t grain = grain_for(classes);
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* row = y + r * classes;
      std::fill(row, row + classes, T(0));
      row[labels[r]] = T(1);
    }
  });
}

#if TIDE_SGEMM_ONEDNN
namespace {
// C's rows in parts on tide's pool, oneDNN serial in each (for_onednn_row_parts): its OpenMP
// team would spin after every call on the cores the pool's next loop needs (the char GPT's
// eager step took 34 ms that way, 23 ms this way). after(r0, r1) runs on each part's rows
// once they are computed, while they are in that core's cache (the Linear layer's epilogue).
template <class After>
void onednn_sgemm_parts(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                        int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                        const After& after) {
  std::atomic<int> failed{int(dnnl_success)};
  for_onednn_row_parts(m, n, k, [&](int64_t r0, int64_t mr) {
    if (k == 0) {  // oneDNN leaves C as it was; beta = 0 means zeros, as cblas gives
      for (int64_t r = r0; r < r0 + mr; ++r) std::fill_n(c + r * ldc, n, 0.0f);
    } else {
      const dnnl_status_t s1 =
          dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', mr, n, k, 1.0f, ta ? a + r0 : a + r0 * lda,
                     lda, b, ldb, 0.0f, c + r0 * ldc, ldc);
      if (s1 != dnnl_success) return failed.store(int(s1));
    }
    after(r0, r0 + mr);
  });
  const auto st = dnnl_status_t(failed.load());
  if (st != dnnl_success)
    throw Error("matmul", detail::concat("oneDNN's sgemm failed (status ", int(st), ") for ", m,
                                         "x", k, " @ ", k, "x", n));
}
}  // namespace
#endif

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float* c, int64_t ldc) {
#if TIDE_SGEMM_ONEDNN  // -DTIDE_BLAS=onednn (cmake/Blas.cmake): row-major, as cblas here
  onednn_sgemm_parts(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, [](int64_t, int64_t) {});
#else
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), 1.0f, a, int(lda), b, int(ldb), 0.0f, c, int(ldc));
#endif
}

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
              int(n), int(k), 1.0, a, int(lda), b, int(ldb), 0.0, c, int(ldc));
}

namespace {

// x rounded to TF32 (10 mantissa bits) to nearest, ties away from zero: CUDA's
// cvt.rna.tf32.f32, which tensor cores apply to float32 operands. inf and NaN stay.
float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &u, sizeof u);
  return x;
}

}  // namespace

template <class T>
void gemm(const KernelContext&, const Gemm<T>& g, const NoExtra&) {
  if constexpr (is_half_v<T>) {
    half_gemm(g);
  } else {
    if constexpr (std::is_same_v<T, float>) {
      // Set only for a GPU (ops/linalg.cpp), so here only on the recording fake: the product
      // of the TF32-rounded operands, as a GPU's tensor cores take them.
      if (g.tf32) {
        std::vector<float> a, b;
        blas_gemm_loaded(g.ta, g.tb, g.m, g.n, g.k, g.a.get(), g.lda, g.b.get(), g.ldb, g.c.get(),
                         g.ldc, round_to_tf32, a, b);
        return;
      }
    }
    blas_gemm(g.ta, g.tb, g.m, g.n, g.k, g.a.get(), g.lda, g.b.get(), g.ldb, g.c.get(), g.ldc);
  }
}

// Whether several threads may spread a batch of small products (kSmallGemm,
// ops/cpu/blas_gemm.h) over the pool: OpenBLAS's pthread build only. BLIS runs OpenMP teams
// of its own, which nested in the pool would oversubscribe; oneDNN's float products that
// small run in one serial part on the calling worker (not spread over the pool: not measured).
template <class T>
bool parallel_batches() {
  static const bool ok = [] {
    const BlasThreadsInfo info = configure_blas_threads();
    return info.library == "OpenBLAS" && (std::is_same_v<T, double> || info.configured != "onednn");
  }();
  return ok;
}

namespace {

template <class T>
void blas_gemm_batched(const KernelContext& ctx, const Gemm<T>& g, const GemmBatch& bt) {
  const int64_t total = bt.outer * bt.count, block = g.m * g.ldc;
  auto one = [&](int64_t i) {
    const int64_t o = i / bt.count, j = i % bt.count;
    Gemm<T> s = g;
    s.a.offset += o * bt.outer_a + j * bt.stride_a;
    s.b.offset += o * bt.outer_b + j * bt.stride_b;
    s.c.offset += i * block;
    gemm(ctx, s, NoExtra{});
  };
  const int64_t work = std::max<int64_t>(1, g.m * g.n * std::max<int64_t>(1, g.k));
  if (work <= kSmallGemm && total > 1 && parallel_batches<T>()) {
    parallel_for(total, std::max<int64_t>(1, kSmallGemm / work), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) one(i);
    });
    return;
  }
  for (int64_t i = 0; i < total; ++i) one(i);  // each product uses the BLAS's own threads
}

// Rows r0 .. r1 of c: + bias, then the activation (GELU: pre = c + bias, c = GELU(pre)).
template <class T>
void bias_rows(const GemmBias<T>& gb, int64_t r0, int64_t r1) {
  T* c = gb.g.c.get();
  const T* bias = gb.bias.get();
  const int64_t n = gb.g.n, ldc = gb.g.ldc;
  for (int64_t r = r0; r < r1; ++r) {
    T* row = c + r * ldc;
    if (gb.act == LinearAct::gelu_tanh) {
      T* pre = gb.pre.get() + r * ldc;
      for (int64_t j = 0; j < n; ++j) pre[j] = row[j] + bias[j];
      gelu_tanh_serial(pre, row, n);
    } else if (gb.act == LinearAct::relu) {
      for (int64_t j = 0; j < n; ++j) {
        const T v = row[j] + bias[j];
        row[j] = v > T(0) ? v : T(0);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    }
  }
}

template <class T>
void blas_gemm_bias(const KernelContext& ctx, const GemmBias<T>& gb, const NoExtra& x) {
  const Gemm<T>& g = gb.g;
#if TIDE_SGEMM_ONEDNN
  // The epilogue on each row part as soon as its GEMM is done (its rows still in cache).
  if constexpr (std::is_same_v<T, float>)
    if (!g.tf32)
      return onednn_sgemm_parts(g.ta, g.tb, g.m, g.n, g.k, g.a.get(), g.lda, g.b.get(), g.ldb,
                                g.c.get(), g.ldc,
                                [&](int64_t r0, int64_t r1) { bias_rows(gb, r0, r1); });
#endif
  gemm(ctx, g, x);
  parallel_for(g.m, grain_for(g.n), [&](int64_t r0, int64_t r1) { bias_rows(gb, r0, r1); });
}

}  // namespace

template <class T>
void gemm_batched(const KernelContext& ctx, const Gemm<T>& g, const GemmBatch& bt) {
  if constexpr (is_half_v<T>) half_gemm_batched(g, bt);
  else blas_gemm_batched(ctx, g, bt);
}

template <class T>
void gemm_bias(const KernelContext& ctx, const GemmBias<T>& gb, const NoExtra& x) {
  if constexpr (is_half_v<T>) half_gemm_bias(gb);
  else blas_gemm_bias(ctx, gb, x);
}

template <class T>
void transpose(const KernelContext&, const Transpose<T>& t, const NoExtra&) {
  const T* pa = t.a.get();
  T* py = t.y.get();
  const int64_t r = t.rows, c = t.cols;
  constexpr int64_t B = 32;  // cache blocks
  int64_t blocks = (r + B - 1) / B;
  parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / (B * std::max<int64_t>(c, 1))),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t i0 = b0 * B; i0 < std::min(r, b1 * B); i0 += B)
                   for (int64_t j0 = 0; j0 < c; j0 += B)
                     for (int64_t i = i0; i < std::min(r, i0 + B); ++i)
                       for (int64_t j = j0; j < std::min(c, j0 + B); ++j)
                         py[j * r + i] = pa[i * c + j];
               });
}

template <class T>
void swap_axes(const KernelContext&, const SwapAxes<T>& t, const NoExtra&) {
  const T* pa = t.a.get();
  T* py = t.y.get();
  const int64_t n1 = t.n1, mid = t.mid, n2 = t.n2, inner = t.inner;
  // One task per output run of `inner` elements: y[o, j, m, i, :] = a[o, i, m, j, :].
  const int64_t runs = t.outer * n2 * mid * n1;
  parallel_for(runs, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const T* src = pa + swap_axes_source_run(r, n1, mid, n2) * inner;
                   std::copy(src, src + inner, py + r * inner);
                 }
               });
}

// 16-bit rows load widened to float and compute as float32 rows do (R = compute_t<T>),
// rounding each output once: the bits of the float32 kernel between casts.
template <class T>
void softmax_rows(const KernelContext&, const SoftmaxRows<T>& s, const NoExtra&) {
  using R = compute_t<T>;
  const T* x = s.x.get();
  T* y = s.y.get();
  const int64_t n = s.n;
  const bool log_out = s.log;
  int64_t grain = grain_for(n);
  parallel_for(s.rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      R m = widen(xr[0]);
      for (int64_t i = 1; i < n; ++i) m = widen(xr[i]) > m ? widen(xr[i]) : m;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(double(widen(xr[i]) - m));
      if (log_out) {
        R ls = R(std::log(sum));
        for (int64_t i = 0; i < n; ++i) yr[i] = T(widen(xr[i]) - m - ls);
      } else {
        double inv = 1.0 / sum;
        for (int64_t i = 0; i < n; ++i)
          yr[i] = half_convert<T>(std::exp(double(widen(xr[i]) - m)) * inv);
      }
    }
  });
}

#define TIDE_CROSS_ENTROPY(T, L)                                                              \
  template void cross_entropy_rows<T, L>(const KernelContext&, const CrossEntropyRows<T, L>&, \
                                         const NoExtra&);                                     \
  template void cross_entropy_grad<T, L>(const KernelContext&, const CrossEntropyGrad<T, L>&, \
                                         const NoExtra&);
// one_hot takes float32 and float64 only; the cross-entropy rows the 16-bit types too.
#define TIDE_ONE_HOT(T, L)                                                                         \
  template void one_hot_rows<T, L>(const KernelContext&, const OneHotRows<T, L>&, const NoExtra&); \
  TIDE_CROSS_ENTROPY(T, L)
TIDE_ONE_HOT(float, int32_t)
TIDE_ONE_HOT(float, int64_t)
TIDE_ONE_HOT(double, int32_t)
TIDE_ONE_HOT(double, int64_t)
#undef TIDE_ONE_HOT
TIDE_CROSS_ENTROPY(bfloat16, int32_t)
TIDE_CROSS_ENTROPY(bfloat16, int64_t)
TIDE_CROSS_ENTROPY(float16, int32_t)
TIDE_CROSS_ENTROPY(float16, int64_t)
#undef TIDE_CROSS_ENTROPY
template void gemm<float>(const KernelContext&, const Gemm<float>&, const NoExtra&);
template void gemm<double>(const KernelContext&, const Gemm<double>&, const NoExtra&);
template void gemm_batched<float>(const KernelContext&, const Gemm<float>&, const GemmBatch&);
template void gemm_batched<double>(const KernelContext&, const Gemm<double>&, const GemmBatch&);
template void gemm_bias<float>(const KernelContext&, const GemmBias<float>&, const NoExtra&);
template void gemm_bias<double>(const KernelContext&, const GemmBias<double>&, const NoExtra&);
template void gemm<bfloat16>(const KernelContext&, const Gemm<bfloat16>&, const NoExtra&);
template void gemm<float16>(const KernelContext&, const Gemm<float16>&, const NoExtra&);
template void gemm_batched<bfloat16>(const KernelContext&, const Gemm<bfloat16>&, const GemmBatch&);
template void gemm_batched<float16>(const KernelContext&, const Gemm<float16>&, const GemmBatch&);
template void gemm_bias<bfloat16>(const KernelContext&, const GemmBias<bfloat16>&, const NoExtra&);
template void gemm_bias<float16>(const KernelContext&, const GemmBias<float16>&, const NoExtra&);
template void transpose<float>(const KernelContext&, const Transpose<float>&, const NoExtra&);
template void transpose<double>(const KernelContext&, const Transpose<double>&, const NoExtra&);
template void transpose<int32_t>(const KernelContext&, const Transpose<int32_t>&, const NoExtra&);
template void transpose<int64_t>(const KernelContext&, const Transpose<int64_t>&, const NoExtra&);
template void swap_axes<float>(const KernelContext&, const SwapAxes<float>&, const NoExtra&);
template void swap_axes<double>(const KernelContext&, const SwapAxes<double>&, const NoExtra&);
template void swap_axes<int32_t>(const KernelContext&, const SwapAxes<int32_t>&, const NoExtra&);
template void swap_axes<int64_t>(const KernelContext&, const SwapAxes<int64_t>&, const NoExtra&);
// 16-bit tensors move as they are (no arithmetic): the float32 path's bits, without casts.
template void transpose<bfloat16>(const KernelContext&, const Transpose<bfloat16>&, const NoExtra&);
template void transpose<float16>(const KernelContext&, const Transpose<float16>&, const NoExtra&);
template void swap_axes<bfloat16>(const KernelContext&, const SwapAxes<bfloat16>&, const NoExtra&);
template void swap_axes<float16>(const KernelContext&, const SwapAxes<float16>&, const NoExtra&);
template void softmax_rows<float>(const KernelContext&, const SoftmaxRows<float>&, const NoExtra&);
template void softmax_rows<double>(const KernelContext&, const SoftmaxRows<double>&,
                                   const NoExtra&);
template void softmax_rows<bfloat16>(const KernelContext&, const SoftmaxRows<bfloat16>&,
                                     const NoExtra&);
template void softmax_rows<float16>(const KernelContext&, const SoftmaxRows<float16>&,
                                    const NoExtra&);

}  // namespace tide::kernels::cpu
