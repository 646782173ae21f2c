// The im2col form of the CPU's convolutions (ops/cpu/conv.cpp): the columns
// a GEMM multiplies, their adjoint, and how many samples' columns are made at a time. The
// columns may widen their elements (16-bit x into float columns). Not a public header.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/float16.h"
#include "core/thread_pool.h"
#include "ops/conv_kernels.h"
#include "ops/op_util.h"

namespace tide::kernels::cpu {

// Row-major c (m x n) = alpha * op(a) @ op(b) + beta * c.
template <class T>
void conv_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const CBLAS_TRANSPOSE cta = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE ctb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, cta, ctb, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, cta, ctb, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
}

// The outputs [lo, hi) of a row of `out` outputs whose input column o * stride - pad + off
// lies inside [0, in): the rest read padding.
inline void inside(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t off, int64_t& lo,
                   int64_t& hi) {
  const int64_t first = pad - off;  // o * stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = in - 1 + pad - off;  // o * stride <= last
  hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  lo = std::min(lo, hi);
}

// The columns (of C: T, or float for a 16-bit T) of `samples` consecutive samples' group of cg
// channels (x points at the first sample's group; samples are x_stride elements apart), one (cg *
// kh * kw) x (oh * ow) matrix per sample, end to end in col: row (c, i, j) holds the input element
// each output position sees at window offset (i, j) of channel c, 0 in the padding.
template <class T, class C = T>
void im2col(const T* x, int64_t samples, int64_t x_stride, int64_t cg, const ConvGeom& g, C* col) {
  const int64_t rows = cg * g.kh * g.kw, ohw = g.oh * g.ow;
  parallel_for(samples * rows, tide::detail::grain_for(ohw), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t s = t / rows, r = t % rows;
      const int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
      const T* plane = x + s * x_stride + c * g.h * g.w;
      C* out = col + t * ohw;
      int64_t lo, hi;
      inside(g.ow, g.w, g.sw, g.pw, j * g.dw, lo, hi);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t iy = oy * g.sh - g.ph + i * g.dh;
        C* orow = out + oy * g.ow;
        if (iy < 0 || iy >= g.h) {
          std::fill(orow, orow + g.ow, C(0));
          continue;
        }
        // Input index of output ox: base + ox * sw, inside the row for ox in [lo, hi).
        const int64_t base = iy * g.w + j * g.dw - g.pw;
        std::fill(orow, orow + lo, C(0));
        if constexpr (std::is_same_v<T, C>) {
          if (g.sw == 1) {
            std::copy(plane + base + lo, plane + base + hi, orow + lo);
            std::fill(orow + hi, orow + g.ow, C(0));
            continue;
          }
        }
        if (g.sw == 1)
          for (int64_t ox = lo; ox < hi; ++ox) orow[ox] = C(widen(plane[base + ox]));
        else
          for (int64_t ox = lo; ox < hi; ++ox) orow[ox] = C(widen(plane[base + ox * g.sw]));
        std::fill(orow + hi, orow + g.ow, C(0));
      }
    }
  });
}

// The adjoint of im2col: each sample's cg planes of dx (zeroed by the caller) += each
// column entry at the input element it was copied from. Parallel over (sample, channel):
// each writes its own plane.
template <class T>
void col2im(const T* col, int64_t samples, int64_t x_stride, int64_t cg, const ConvGeom& g, T* dx) {
  const int64_t ohw = g.oh * g.ow;
  parallel_for(samples * cg, tide::detail::grain_for(g.kh * g.kw * ohw),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t s = t / cg, c = t % cg;
                   T* plane = dx + s * x_stride + c * g.h * g.w;
                   for (int64_t i = 0; i < g.kh; ++i)
                     for (int64_t j = 0; j < g.kw; ++j) {
                       const T* in = col + ((t * g.kh + i) * g.kw + j) * ohw;
                       int64_t lo, hi;
                       inside(g.ow, g.w, g.sw, g.pw, j * g.dw, lo, hi);
                       for (int64_t oy = 0; oy < g.oh; ++oy) {
                         const int64_t iy = oy * g.sh - g.ph + i * g.dh;
                         if (iy < 0 || iy >= g.h) continue;
                         const int64_t base = iy * g.w + j * g.dw - g.pw;  // as in im2col
                         const T* crow = in + oy * g.ow;
                         for (int64_t ox = lo; ox < hi; ++ox) plane[base + ox * g.sw] += crow[ox];
                       }
                     }
                 }
               });
}

// The sizes of one conv's per-sample GEMMs and how many samples share one parallel region
// of im2col / col2im: the columns of a chunk (at most ~4 MB of float, so they stay in the
// last-level cache until their GEMMs read them) are made in one region, then multiplied
// one GEMM per sample. The pool's helpers and the BLAS's threads then hand the cores over
// once per chunk, not once per sample.
struct ConvShapes {
  int64_t cg, og, k, ohw, chunk;
  explicit ConvShapes(const ConvGeom& g)
      : cg(g.c / g.groups), og(g.o / g.groups), k(cg * g.kh * g.kw), ohw(g.oh * g.ow) {
    constexpr int64_t kChunkElements = int64_t(1) << 20;
    chunk = std::clamp<int64_t>(kChunkElements / std::max<int64_t>(1, k * ohw), 1,
                                std::max<int64_t>(1, g.n));
  }
};

// A buffer of at least n T kept per worker thread and per `Use`, reused by the calls after
// it: a kernel holding several at once gives each its own Use (the columns take 0).
template <class T, int Use = 0>
T* thread_buffer(int64_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

}  // namespace tide::kernels::cpu
