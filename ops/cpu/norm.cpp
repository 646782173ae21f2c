// CPU entries of the normalisation family (ops/norm_kernels.h): layer norm, parallel over
// rows, each row's sums in double in a fixed order (ops/cpu/lane_sum.h). The gradient's
// sums over the rows (dweight, dbias) go through per-chunk partials in a split that depends
// only on the row count (layer_norm_parts), added in chunk order: the same bits on any
// thread count. 16-bit tensors load widened and compute the same way (float statistics).
// The loops run compiled for the widest vector ISA (ops/cpu/isa_parallel.h). Not here: a
// single-pass (Welford) statistic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/isa_parallel.h"
#include "ops/cpu/lane_sum.h"
#include "ops/norm_kernels.h"
#include "ops/op_util.h"

namespace tide::kernels::cpu {

using tide::detail::grain_for;
using tide::detail::isa_parallel_for;

template <class T>
void layer_norm(const KernelContext&, const LayerNorm<T>& a, const NoExtra&) {
  const int64_t rows = a.rows, d = a.d;
  const T* x = a.x.get();
  const T* w = a.has_weight ? a.weight.get() : nullptr;
  const T* b = a.has_bias ? a.bias.get() : nullptr;
  T* y = a.y.get();
  compute_t<T>* stats = a.stats.get();
  isa_parallel_for(
      rows, grain_for(3 * d), [&](int64_t r0, int64_t r1) __attribute__((always_inline)) {
        std::vector<double> xd(static_cast<size_t>(d));  // the row in double, widened once
        for (int64_t r = r0; r < r1; ++r) {
          const T* p = x + r * d;
          T* q = y + r * d;
          for (int64_t j = 0; j < d; ++j) xd[j] = double(widen(p[j]));
          const double mean = lane_sum<double>(d, [&](int64_t j) { return xd[j]; }) / double(d);
          // Two passes: no cancellation for rows with a large mean.
          const double var = lane_sum<double>(d,
                                              [&](int64_t j) {
                                                const double c = xd[j] - mean;
                                                return c * c;
                                              }) /
                             double(d);
          const double rstd = 1.0 / std::sqrt(var + a.eps);
          stats[r] = compute_t<T>(mean);
          stats[rows + r] = compute_t<T>(rstd);
          for (int64_t j = 0; j < d; ++j) {
            double v = (xd[j] - mean) * rstd;
            if (w) v *= double(widen(w[j]));
            if (b) v += double(widen(b[j]));
            q[j] = half_convert<T>(v);
          }
        }
      });
}

template <class T>
void layer_norm_grad(const KernelContext&, const LayerNormGrad<T>& a, const NoExtra&) {
  const int64_t rows = a.rows, d = a.d;
  const T* dy = a.dy.get();
  const T* x = a.x.get();
  const T* w = a.has_weight ? a.weight.get() : nullptr;
  const compute_t<T>* stats = a.stats.get();
  T* dx = a.dx.get();
  double* parts = a.param_grads ? a.parts.get() : nullptr;
  const RowParts split = a.split;
  // One chunk of rows per task: dx of its rows and, when asked, its partial sums.
  isa_parallel_for(
      split.parts,
      grain_for(4 * d * split.chunk), [&](int64_t c0, int64_t c1) __attribute__((always_inline)) {
        std::vector<double> gd(static_cast<size_t>(d)), xh(static_cast<size_t>(d));
        for (int64_t c = c0; c < c1; ++c) {
          double* pw = parts ? parts + c * 2 * d : nullptr;
          double* pb = parts ? pw + d : nullptr;
          if (parts) std::fill(pw, pw + 2 * d, 0.0);
          const int64_t r_end = std::min(rows, (c + 1) * split.chunk);
          for (int64_t r = c * split.chunk; r < r_end; ++r) {
            const T* xr = x + r * d;
            const T* gr = dy + r * d;
            T* q = dx + r * d;
            const double mean = double(stats[r]), rstd = double(stats[rows + r]);
            // g = dy * weight and xhat, each computed once into the task's rows.
            for (int64_t j = 0; j < d; ++j) gd[j] = double(widen(gr[j]));
            if (w)
              for (int64_t j = 0; j < d; ++j) gd[j] *= double(widen(w[j]));
            for (int64_t j = 0; j < d; ++j) xh[j] = (double(widen(xr[j])) - mean) * rstd;
            const double mean_g = lane_sum<double>(d, [&](int64_t j) { return gd[j]; }) / double(d);
            const double mean_gx =
                lane_sum<double>(d, [&](int64_t j) { return gd[j] * xh[j]; }) / double(d);
            for (int64_t j = 0; j < d; ++j)
              q[j] = half_convert<T>(rstd * (gd[j] - mean_g - xh[j] * mean_gx));
            if (parts)
              for (int64_t j = 0; j < d; ++j) {
                pw[j] += double(widen(gr[j])) * xh[j];
                pb[j] += double(widen(gr[j]));
              }
          }
        }
      });
  if (!parts) return;
  T* dw = a.dweight.get();
  T* db = a.dbias.get();
  parallel_for(d, grain_for(2 * split.parts), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      double sw = 0, sb = 0;
      for (int64_t c = 0; c < split.parts; ++c) {
        sw += parts[c * 2 * d + j];
        sb += parts[c * 2 * d + d + j];
      }
      dw[j] = half_convert<T>(sw);
      db[j] = half_convert<T>(sb);
    }
  });
}

#define TIDE_NORM(T)                                                                      \
  template void layer_norm<T>(const KernelContext&, const LayerNorm<T>&, const NoExtra&); \
  template void layer_norm_grad<T>(const KernelContext&, const LayerNormGrad<T>&, const NoExtra&);
TIDE_NORM(float)
TIDE_NORM(double)
TIDE_NORM(bfloat16)
TIDE_NORM(float16)
#undef TIDE_NORM

}  // namespace tide::kernels::cpu
