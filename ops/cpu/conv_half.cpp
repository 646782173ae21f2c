// 16-bit convolutions on the CPU (ops/cpu/conv_half.h): the loops of ops/cpu/conv.cpp's
// float32 kernels, call for call (the same GEMM shapes, strides and order), on widened values.
#include "ops/cpu/conv_half.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/im2col.h"

namespace tide::kernels::cpu {

namespace {

// Float scratch kept per thread and per use, as the column buffer is.
template <int Use>
float* scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

template <class H>
void widen_into(const H* x, int64_t n, float* y) {
  parallel_for(n, tide::detail::kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = widen(x[i]);
  });
}

template <class H>
void round_into(const float* x, int64_t n, H* y) {
  parallel_for(n, tide::detail::kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] = H(x[i]);
  });
}

}  // namespace

template <class H>
void half_conv2d(const Conv2dForward<H>& a) {
  const ConvGeom& g = a.g;
  const ConvShapes c(g);
  float* w = scratch<0>(g.o * c.k);
  widen_into(a.weight.get(), g.o * c.k, w);
  float* col = column_buffer<float>(c.chunk * c.k * c.ohw);
  float* out = scratch<1>(c.og * c.ohw);
  const H* x = a.x.get();
  const H* bias = a.has_bias ? a.bias.get() : nullptr;
  H* y = a.y.get();
  for (int64_t n0 = 0; n0 < g.n; n0 += c.chunk) {
    const int64_t ns = std::min(c.chunk, g.n - n0);
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      im2col(x + (n0 * g.c + gi * c.cg) * g.h * g.w, ns, g.c * g.h * g.w, c.cg, g, col);
      for (int64_t s = 0; s < ns; ++s) {
        conv_gemm<float>(false, false, c.og, c.ohw, c.k, w + gi * c.og * c.k, c.k,
                         col + s * c.k * c.ohw, c.ohw, 0.0f, out, c.ohw);
        // The float32 kernel adds the bias to its float output; here before the one rounding.
        H* ys = y + ((n0 + s) * g.o + gi * c.og) * c.ohw;
        parallel_for(c.og, tide::detail::grain_for(c.ohw), [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float b = bias ? widen(bias[gi * c.og + r]) : 0.0f;
            for (int64_t i = 0; i < c.ohw; ++i)
              ys[r * c.ohw + i] = H(bias ? out[r * c.ohw + i] + b : out[r * c.ohw + i]);
          }
        });
      }
    }
  }
}

template <class H>
void half_conv2d_input_grad(const Conv2dInputGrad<H>& a) {
  const ConvGeom& g = a.g;
  const ConvShapes c(g);
  const int64_t sample = g.c * g.h * g.w;
  float* w = scratch<0>(g.o * c.k);
  widen_into(a.weight.get(), g.o * c.k, w);
  float* col = column_buffer<float>(c.chunk * c.k * c.ohw);
  float* dy = scratch<1>(c.og * c.ohw);
  float* dx = scratch<2>(c.chunk * sample);
  for (int64_t n0 = 0; n0 < g.n; n0 += c.chunk) {
    const int64_t ns = std::min(c.chunk, g.n - n0);
    std::fill(dx, dx + ns * sample, 0.0f);
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      for (int64_t s = 0; s < ns; ++s) {
        widen_into(a.dy.get() + ((n0 + s) * g.o + gi * c.og) * c.ohw, c.og * c.ohw, dy);
        conv_gemm<float>(true, false, c.k, c.ohw, c.og, w + gi * c.og * c.k, c.k, dy, c.ohw, 0.0f,
                         col + s * c.k * c.ohw, c.ohw);
      }
      col2im(col, ns, sample, c.cg, g, dx + gi * c.cg * g.h * g.w);
    }
    round_into(dx, ns * sample, a.dx.get() + n0 * sample);
  }
}

template <class H>
void half_conv2d_weight_grad(const Conv2dWeightGrad<H>& a) {
  const ConvGeom& g = a.g;
  const ConvShapes c(g);
  float* dw = scratch<0>(g.o * c.k);
  std::fill(dw, dw + g.o * c.k, 0.0f);
  if (g.n > 0 && c.ohw > 0) {
    float* col = column_buffer<float>(c.chunk * c.k * c.ohw);
    float* dy = scratch<1>(c.og * c.ohw);
    for (int64_t n0 = 0; n0 < g.n; n0 += c.chunk) {
      const int64_t ns = std::min(c.chunk, g.n - n0);
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        im2col(a.x.get() + (n0 * g.c + gi * c.cg) * g.h * g.w, ns, g.c * g.h * g.w, c.cg, g, col);
        for (int64_t s = 0; s < ns; ++s) {
          widen_into(a.dy.get() + ((n0 + s) * g.o + gi * c.og) * c.ohw, c.og * c.ohw, dy);
          conv_gemm<float>(false, true, c.og, c.k, c.ohw, dy, c.ohw, col + s * c.k * c.ohw, c.ohw,
                           n0 + s == 0 ? 0.0f : 1.0f, dw + gi * c.og * c.k, c.k);
        }
      }
    }
  }
  round_into(dw, g.o * c.k, a.dweight.get());
}

#define TIDE_HALF_CONV(H)                                             \
  template void half_conv2d<H>(const Conv2dForward<H>&);              \
  template void half_conv2d_input_grad<H>(const Conv2dInputGrad<H>&); \
  template void half_conv2d_weight_grad<H>(const Conv2dWeightGrad<H>&);
TIDE_HALF_CONV(bfloat16)
TIDE_HALF_CONV(float16)
#undef TIDE_HALF_CONV

}  // namespace tide::kernels::cpu
