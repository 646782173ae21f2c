// CPU entries of conv2d and its two gradients (ops/conv_kernels.h), one template for every
// floating type: im2col + one CBLAS GEMM per sample and group (the weight gradient
// accumulates over the batch with beta = 1, the input gradient is a GEMM then col2im), the
// columns of a chunk of samples made (or scattered back) in one parallel region
// (ops/cpu/im2col.h, ConvShapes).
//
// A storage type T computes in C = compute_t<T>. float32 and float64 compute in place: the
// GEMMs read w and dy and write y, dx and dw where they lie. bfloat16 and float16 run the same
// calls on float values: x widens as its columns are made, w and dy slice by slice into float
// scratch, and each output is rounded once (the forward's after its bias, the input
// gradient's sums from a float32 chunk, the weight gradient's from a float32 accumulator over
// the batch), so their bits are those of the float32 op between casts.
//
// Not here: Winograd or FFT convolution, a direct path for 1x1 kernels, or bfloat16 GEMMs (the
// forward's columns would then be 16-bit and every sum but the last rounded: other bits). One
// GEMM over a whole chunk (its samples' columns side by side) was tried and measured ~10%
// slower on the CNN's 14 x 14 layer (2-core EPYC VM): the output then needs a scatter, and
// the larger GEMM's gain did not pay for it.
#include <algorithm>
#include <cstdint>

#include "core/float16.h"
#include "core/thread_pool.h"
#include "ops/conv_kernels.h"
#include "ops/cpu/im2col.h"

namespace tide::kernels::cpu {

namespace {

using tide::detail::grain_for;

// p's n elements in the compute type: p itself, or (16-bit T) widened into thread_buffer Use
// (1 and up: the columns hold 0).
template <int Use, class T>
const compute_t<T>* in_compute(const T* p, int64_t n) {
  static_assert(Use >= 1, "thread_buffer 0 holds the columns");
  if constexpr (is_half_v<T>) {
    float* s = thread_buffer<float, Use>(n);
    parallel_for(n, tide::detail::kParallelGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) s[i] = widen(p[i]);
    });
    return s;
  } else {
    return p;
  }
}

// Where n results bound for out are summed: out itself, or (16-bit T) thread_buffer Use (1 and
// up), which store_rounded then rounds into out.
template <int Use, class T>
compute_t<T>* out_compute(T* out, int64_t n) {
  static_assert(Use >= 1, "thread_buffer 0 holds the columns");
  if constexpr (is_half_v<T>) return thread_buffer<float, Use>(n);
  else return out;
}

template <class T>
void store_rounded(const compute_t<T>* sums, int64_t n, T* out) {
  if constexpr (is_half_v<T>)
    parallel_for(n, tide::detail::kParallelGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = T(sums[i]);
    });
}

}  // namespace

template <class T>
void conv2d(const KernelContext&, const Conv2dForward<T>& a, const NoExtra&) {
  using C = compute_t<T>;
  const ConvGeom& g = a.g;
  const ConvShapes c(g);
  const T* x = a.x.get();
  const C* w = in_compute<1>(a.weight.get(), g.o * c.k);
  T* y = a.y.get();
  C* col = thread_buffer<C>(c.chunk * c.k * c.ohw);
  for (int64_t n0 = 0; n0 < g.n; n0 += c.chunk) {
    const int64_t ns = std::min(c.chunk, g.n - n0);
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      im2col(x + (n0 * g.c + gi * c.cg) * g.h * g.w, ns, g.c * g.h * g.w, c.cg, g, col);
      for (int64_t s = 0; s < ns; ++s) {
        T* ys = y + ((n0 + s) * g.o + gi * c.og) * c.ohw;
        C* out = out_compute<2>(ys, c.og * c.ohw);
        conv_gemm<C>(false, false, c.og, c.ohw, c.k, w + gi * c.og * c.k, c.k,
                     col + s * c.k * c.ohw, c.ohw, C(0), out, c.ohw);
        if constexpr (is_half_v<T>) {
          // The bias joins the float sums before their one rounding.
          const T* bias = a.has_bias ? a.bias.get() + gi * c.og : nullptr;
          parallel_for(c.og, grain_for(c.ohw), [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              const float b = bias ? widen(bias[r]) : 0.0f;
              for (int64_t i = 0; i < c.ohw; ++i)
                ys[r * c.ohw + i] = T(bias ? out[r * c.ohw + i] + b : out[r * c.ohw + i]);
            }
          });
        }
      }
    }
  }
  if constexpr (!is_half_v<T>) {
    if (!a.has_bias) return;
    const T* b = a.bias.get();
    parallel_for(g.n * g.o, grain_for(c.ohw), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T v = b[p % g.o];
        T* plane = y + p * c.ohw;
        for (int64_t i = 0; i < c.ohw; ++i) plane[i] += v;
      }
    });
  }
}

template <class T>
void conv2d_input_grad(const KernelContext&, const Conv2dInputGrad<T>& a, const NoExtra&) {
  using C = compute_t<T>;
  const ConvGeom& g = a.g;
  const ConvShapes c(g);
  const int64_t sample = g.c * g.h * g.w;
  const C* w = in_compute<1>(a.weight.get(), g.o * c.k);
  C* col = thread_buffer<C>(c.chunk * c.k * c.ohw);
  for (int64_t n0 = 0; n0 < g.n; n0 += c.chunk) {
    const int64_t ns = std::min(c.chunk, g.n - n0);
    T* dx = a.dx.get() + n0 * sample;
    C* sums = out_compute<3>(dx, ns * sample);
    std::fill(sums, sums + ns * sample, C(0));
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      // col_s (k x ohw) = w_g^T (k x og) @ dy_g (og x ohw), then all of the chunk's col2im
      for (int64_t s = 0; s < ns; ++s) {
        const C* dy =
            in_compute<2>(a.dy.get() + ((n0 + s) * g.o + gi * c.og) * c.ohw, c.og * c.ohw);
        conv_gemm<C>(true, false, c.k, c.ohw, c.og, w + gi * c.og * c.k, c.k, dy, c.ohw, C(0),
                     col + s * c.k * c.ohw, c.ohw);
      }
      col2im(col, ns, sample, c.cg, g, sums + gi * c.cg * g.h * g.w);
    }
    store_rounded(sums, ns * sample, dx);
  }
}

template <class T>
void conv2d_weight_grad(const KernelContext&, const Conv2dWeightGrad<T>& a, const NoExtra&) {
  using C = compute_t<T>;
  const ConvGeom& g = a.g;
  const ConvShapes c(g);
  C* dw = out_compute<1>(a.dweight.get(), g.o * c.k);
  if (g.n == 0 || c.ohw == 0) std::fill(dw, dw + g.o * c.k, C(0));
  C* col = thread_buffer<C>(c.chunk * c.k * c.ohw);
  for (int64_t n0 = 0; n0 < g.n && c.ohw > 0; n0 += c.chunk) {
    const int64_t ns = std::min(c.chunk, g.n - n0);
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      im2col(a.x.get() + (n0 * g.c + gi * c.cg) * g.h * g.w, ns, g.c * g.h * g.w, c.cg, g, col);
      // dw_g (og x k) (+)= dy_g (og x ohw) @ col_s^T (ohw x k); the first sample overwrites
      for (int64_t s = 0; s < ns; ++s) {
        const C* dy =
            in_compute<2>(a.dy.get() + ((n0 + s) * g.o + gi * c.og) * c.ohw, c.og * c.ohw);
        conv_gemm<C>(false, true, c.og, c.k, c.ohw, dy, c.ohw, col + s * c.k * c.ohw, c.ohw,
                     n0 + s == 0 ? C(0) : C(1), dw + gi * c.og * c.k, c.k);
      }
    }
  }
  store_rounded(dw, g.o * c.k, a.dweight.get());
}

#define TIDE_CONVOLUTION(T)                                                               \
  template void conv2d<T>(const KernelContext&, const Conv2dForward<T>&, const NoExtra&); \
  template void conv2d_input_grad<T>(const KernelContext&, const Conv2dInputGrad<T>&,     \
                                     const NoExtra&);                                     \
  template void conv2d_weight_grad<T>(const KernelContext&, const Conv2dWeightGrad<T>&,   \
                                      const NoExtra&);
TIDE_CONVOLUTION(float)
TIDE_CONVOLUTION(double)
TIDE_CONVOLUTION(bfloat16)
TIDE_CONVOLUTION(float16)
#undef TIDE_CONVOLUTION

}  // namespace tide::kernels::cpu
