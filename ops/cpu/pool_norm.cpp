// CPU entries of the convolutional-network family's pooling and batch normalisation
// (ops/conv_kernels.h; the convolutions are in ops/cpu/conv.cpp): plain loops,
// parallel over independent planes or channels with sums in double in a fixed order
// (ops/cpu/lane_sum.h), so results never depend on the thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "ops/conv_kernels.h"
#include "ops/cpu/lane_sum.h"
#include "ops/op_util.h"
#include "ops/pool_window.h"

namespace tide::kernels::cpu {

using tide::detail::grain_for;

namespace {

// Calls f(plane index) for each of the n * c planes, in parallel.
template <class F>
void for_planes(const PoolGeom& g, int64_t work_per_plane, F&& f) {
  parallel_for(g.n * g.c, grain_for(work_per_plane), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) f(p);
  });
}

// window_argmax for KH x KW windows that lie inside the plane (no padding), with the
// window's size known to the compiler and no branch on the data: the maximum as a chain
// of max instructions (NaN tracked aside), then the first element equal to it, or the
// first NaN, as the lowest bit of a hit mask. window_argmax's compare-and-replace loop ran
// ~40 cycles per 2x2 window (mispredicted branches on random data).
template <int KH, int KW, class T, class F>
void inside_window_maxima(const T* plane, const PoolGeom& g, F& f) {
  constexpr int K = KH * KW;
  static_assert(K <= 32, "the hit mask is 32 bits");
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t at0 = oy * g.sh * g.w + ox * g.sw;
      T v[K];
      for (int i = 0; i < KH; ++i)
        for (int j = 0; j < KW; ++j) v[i * KW + j] = plane[at0 + i * g.w + j];
      T m = v[0];
      for (int k = 1; k < K; ++k) m = v[k] > m ? v[k] : m;
      uint32_t eq = 0, nan = 0;
      for (int k = 0; k < K; ++k) {
        eq |= uint32_t(v[k] == m) << k;
        nan |= uint32_t(v[k] != v[k]) << k;
      }
      const int best = std::countr_zero(nan | (eq & (0u - uint32_t(nan == 0))));
      f(oy * g.ow + ox, at0 + (best / KW) * g.w + best % KW, v[best]);
    }
}

// Calls f(output index, flat index of its window's first maximum, that maximum) for every
// output of one plane, in order. The common windows without padding take the unrolled
// path.
template <class T, class F>
void for_window_maxima(const T* plane, const PoolGeom& g, F&& f) {
  if (g.ph == 0 && g.pw == 0) {
    if (g.kh == 2 && g.kw == 2) return inside_window_maxima<2, 2>(plane, g, f);
    if (g.kh == 3 && g.kw == 3) return inside_window_maxima<3, 3>(plane, g, f);
  }
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t at = window_argmax(plane, g, oy, ox);
      f(oy * g.ow + ox, at, plane[at]);
    }
}

}  // namespace

template <class T>
void max_pool2d(const KernelContext&, const MaxPool2d<T>& a, const NoExtra&) {
  const PoolGeom& g = a.g;
  const T* x = a.x.get();
  T* y = a.y.get();
  for_planes(g, g.oh * g.ow * g.kh * g.kw, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* out = y + p * g.oh * g.ow;
    for_window_maxima(plane, g, [&](int64_t o, int64_t, T m) { out[o] = m; });
  });
}

template <class T>
void max_pool2d_grad(const KernelContext&, const MaxPool2dGrad<T>& a, const NoExtra&) {
  const PoolGeom& g = a.g;
  const T* x = a.x.get();
  const T* dy = a.dy.get();
  T* dx = a.dx.get();
  for_planes(g, g.oh * g.ow * g.kh * g.kw, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    const T* gin = dy + p * g.oh * g.ow;
    T* gout = dx + p * g.h * g.w;
    std::fill(gout, gout + g.h * g.w, T(0));
    for_window_maxima(plane, g, [&](int64_t o, int64_t at, T) { gout[at] += gin[o]; });
  });
}

template <class T>
void avg_pool2d(const KernelContext&, const AvgPool2d<T>& a, const NoExtra&) {
  const PoolGeom& g = a.g;
  const T* x = a.x.get();
  T* y = a.y.get();
  const double inv = 1.0 / double(g.kh * g.kw);  // padding counts (count_include_pad)
  for_planes(g, g.oh * g.ow * g.kh * g.kw, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* out = y + p * g.oh * g.ow;
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const Window b = window_of(g, oy, ox);
        double s = 0;
        for (int64_t iy = b.ya; iy < b.yb; ++iy)
          for (int64_t ix = b.xa; ix < b.xb; ++ix) s += double(plane[iy * g.w + ix]);
        out[oy * g.ow + ox] = T(s * inv);
      }
  });
}

template <class T>
void avg_pool2d_grad(const KernelContext&, const AvgPool2dGrad<T>& a, const NoExtra&) {
  const PoolGeom& g = a.g;
  const T* dy = a.dy.get();
  T* dx = a.dx.get();
  const T inv = T(1.0 / double(g.kh * g.kw));
  for_planes(g, g.oh * g.ow * g.kh * g.kw, [&](int64_t p) {
    const T* gin = dy + p * g.oh * g.ow;
    T* gout = dx + p * g.h * g.w;
    std::fill(gout, gout + g.h * g.w, T(0));
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const Window b = window_of(g, oy, ox);
        const T v = gin[oy * g.ow + ox] * inv;
        for (int64_t iy = b.ya; iy < b.yb; ++iy)
          for (int64_t ix = b.xa; ix < b.xb; ++ix) gout[iy * g.w + ix] += v;
      }
  });
}

template <class T>
void batch_norm(const KernelContext&, const BatchNorm<T>& a, const NoExtra&) {
  const int64_t n = a.n, c = a.c, s = a.s, m = n * s;
  const T* x = a.x.get();
  const T* w = a.weight.get();
  const T* b = a.bias.get();
  T* y = a.y.get();
  T* stats = a.stats.get();
  T* rm = a.has_running ? a.running_mean.get() : nullptr;  // required when not training
  T* rv = a.has_running ? a.running_var.get() : nullptr;
  parallel_for(c, grain_for(2 * m), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double mean, invstd;
      if (a.training) {
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* p = x + (i * c + ch) * s;
          sum += lane_sum<double>(s, [p](int64_t j) { return double(p[j]); });
        }
        mean = sum / double(m);
        double sq = 0;  // two passes: no cancellation for large means
        for (int64_t i = 0; i < n; ++i) {
          const T* p = x + (i * c + ch) * s;
          sq += lane_sum<double>(s, [p, mean](int64_t j) {
            const double d = double(p[j]) - mean;
            return d * d;
          });
        }
        const double var = sq / double(m);
        invstd = 1.0 / std::sqrt(var + a.eps);
        if (rm) {
          const double mo = a.momentum;
          rm[ch] = T((1 - mo) * double(rm[ch]) + mo * mean);
          rv[ch] = T((1 - mo) * double(rv[ch]) + mo * (sq / double(m - 1)));
        }
      } else {
        mean = double(rm[ch]);
        invstd = 1.0 / std::sqrt(double(rv[ch]) + a.eps);
      }
      stats[ch] = T(mean);
      stats[c + ch] = T(invstd);
      const double scale = invstd * double(w[ch]), shift = double(b[ch]) - mean * scale;
      for (int64_t i = 0; i < n; ++i) {
        const T* p = x + (i * c + ch) * s;
        T* q = y + (i * c + ch) * s;
        for (int64_t j = 0; j < s; ++j) q[j] = T(double(p[j]) * scale + shift);
      }
    }
  });
}

template <class T>
void batch_norm_grad(const KernelContext&, const BatchNormGrad<T>& a, const NoExtra&) {
  const int64_t n = a.n, c = a.c, s = a.s, m = n * s;
  const T* dy = a.dy.get();
  const T* x = a.x.get();
  const T* w = a.weight.get();
  const T* stats = a.stats.get();
  T* dx = a.dx.get();
  T* dw = a.dweight.get();
  T* db = a.dbias.get();
  parallel_for(c, grain_for(2 * m), [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      const double mean = double(stats[ch]), invstd = double(stats[c + ch]);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* p = x + (i * c + ch) * s;
        const T* g = dy + (i * c + ch) * s;
        sum_dy += lane_sum<double>(s, [g](int64_t j) { return double(g[j]); });
        sum_dy_xhat += lane_sum<double>(
            s, [p, g, mean](int64_t j) { return double(g[j]) * (double(p[j]) - mean); });
      }
      sum_dy_xhat *= invstd;
      db[ch] = T(sum_dy);
      dw[ch] = T(sum_dy_xhat);
      const double k = double(w[ch]) * invstd;
      // Training: the batch's mean and variance depend on x too.
      const double mean_dy = a.training ? sum_dy / double(m) : 0.0;
      const double mean_dy_xhat = a.training ? sum_dy_xhat / double(m) : 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const T* p = x + (i * c + ch) * s;
        const T* g = dy + (i * c + ch) * s;
        T* q = dx + (i * c + ch) * s;
        for (int64_t j = 0; j < s; ++j) {
          const double xhat = (double(p[j]) - mean) * invstd;
          q[j] = T(k * (double(g[j]) - mean_dy - xhat * mean_dy_xhat));
        }
      }
    }
  });
}

#define TIDE_CONV(T)                                                                               \
  template void max_pool2d<T>(const KernelContext&, const MaxPool2d<T>&, const NoExtra&);          \
  template void max_pool2d_grad<T>(const KernelContext&, const MaxPool2dGrad<T>&, const NoExtra&); \
  template void avg_pool2d<T>(const KernelContext&, const AvgPool2d<T>&, const NoExtra&);          \
  template void avg_pool2d_grad<T>(const KernelContext&, const AvgPool2dGrad<T>&, const NoExtra&); \
  template void batch_norm<T>(const KernelContext&, const BatchNorm<T>&, const NoExtra&);          \
  template void batch_norm_grad<T>(const KernelContext&, const BatchNormGrad<T>&, const NoExtra&);
TIDE_CONV(float)
TIDE_CONV(double)
#undef TIDE_CONV

}  // namespace tide::kernels::cpu
