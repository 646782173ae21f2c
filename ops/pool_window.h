// The pooling windows, shared by the CPU loops (ops/cpu/pool_norm.cpp) and the CUDA kernels
// (ops/cuda/pool_norm.cu), so both pick the same maximum and sum the same elements.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "ops/conv_kernels.h"

namespace tide::kernels {

// The in-bounds rows [ya, yb) and columns [xa, xb) of output (oy, ox)'s window.
struct Window {
  int64_t ya, yb, xa, xb;
};
TIDE_HOST_DEVICE Window window_of(const PoolGeom& g, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  return {y0 > 0 ? y0 : 0, y0 + g.kh < g.h ? y0 + g.kh : g.h, x0 > 0 ? x0 : 0,
          x0 + g.kw < g.w ? x0 + g.kw : g.w};
}

// The flat index (iy * w + ix) of the first maximum of output (oy, ox)'s window in one
// plane; NaN wins as in PyTorch. Padding positions are skipped (they count as -infinity);
// the front-end keeps the padding under half the window, so every window has an element.
template <class T>
TIDE_HOST_DEVICE int64_t window_argmax(const T* plane, const PoolGeom& g, int64_t oy, int64_t ox) {
  const Window b = window_of(g, oy, ox);
  int64_t best = b.ya * g.w + b.xa;
  T m = plane[best];
  if (m != m) return best;  // NaN
  for (int64_t iy = b.ya; iy < b.yb; ++iy) {
    const T* row = plane + iy * g.w;
    for (int64_t ix = b.xa; ix < b.xb; ++ix) {
      const T v = row[ix];
      if (!(v <= m)) {  // greater, or NaN: the first NaN wins
        m = v;
        best = iy * g.w + ix;
        if (v != v) return best;
      }
    }
  }
  return best;
}

}  // namespace tide::kernels
