// CUDA launchers of the pooling and batch-norm entries (ops/conv_kernels.h): tide's own
// kernels, not cuDNN's.
//   - Pooling: one thread per output (forward) or per input element (gradients). The
//     windows and the maximum come from ops/pool_window.h, which the CPU loops use too, and
//     each input's gradient adds its windows' contributions in the CPU's order (rows, then
//     columns), so results equal the CPU's bit for bit, with no atomics. cuDNN's pooling
//     backward needs the forward's output, which tide's gradient op does not keep, and it
//     may pick another maximum among ties than the CPU.
//   - Batch norm: one block per channel; the sums are in double, over a fixed tree (the
//     same bits every run, not the CPU's order, so within rounding of the CPU).
// Products are rounded before they are added (__dmul_rn, __fmul_rn), as on the CPU, where
// they are never fused into an FMA. Compiled in CI; written without a GPU to run it on
// (scripts/gpu_check.sh runs the pooling and batch-norm cases of tests/ops on one).
#include <cstdint>
#include <type_traits>

#include "core/cuda/await_grids.h"
#include "ops/conv_kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/pool_window.h"

namespace tide::kernels::cuda {

namespace {

template <class T>
__device__ __forceinline__ T mul_rn(T a, T b) {
  if constexpr (std::is_same_v<T, float>) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
}

// The outputs whose windows hold input row (or column) i: [lo, hi).
__device__ __forceinline__ void covering(int64_t i, int64_t pad, int64_t k, int64_t stride,
                                         int64_t outs, int64_t& lo, int64_t& hi) {
  const int64_t a = i + pad - k + 1;  // first output start <= i ... start + k > i
  lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  hi = (i + pad) / stride + 1;
  if (hi > outs) hi = outs;
}

template <class T>
__global__ void max_pool_fwd(const T* x, T* y, PoolGeom g) {
  tide::cuda::await_prerequisite_grids();
  const int64_t per = g.oh * g.ow, total = g.n * g.c * per;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t p = e / per, r = e % per;
    const T* plane = x + p * g.h * g.w;
    y[e] = plane[window_argmax(plane, g, r / g.ow, r % g.ow)];
  }
}

template <class T>
__global__ void max_pool_bwd(const T* x, const T* dy, T* dx, PoolGeom g) {
  tide::cuda::await_prerequisite_grids();
  const int64_t per = g.h * g.w, total = g.n * g.c * per;
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t p = e / per, pos = e % per, iy = pos / g.w, ix = pos % g.w;
    const T* plane = x + p * per;
    const T* gin = dy + p * g.oh * g.ow;
    int64_t y0, y1, x0, x1;
    covering(iy, g.ph, g.kh, g.sh, g.oh, y0, y1);
    covering(ix, g.pw, g.kw, g.sw, g.ow, x0, x1);
    T acc = T(0);
    for (int64_t oy = y0; oy < y1; ++oy)
      for (int64_t ox = x0; ox < x1; ++ox)
        if (window_argmax(plane, g, oy, ox) == pos) acc += gin[oy * g.ow + ox];
    dx[e] = acc;
  }
}

template <class T>
__global__ void avg_pool_fwd(const T* x, T* y, PoolGeom g) {
  tide::cuda::await_prerequisite_grids();
  const int64_t per = g.oh * g.ow, total = g.n * g.c * per;
  const double inv = 1.0 / double(g.kh * g.kw);  // padding counts (count_include_pad)
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t p = e / per, r = e % per;
    const T* plane = x + p * g.h * g.w;
    const Window b = window_of(g, r / g.ow, r % g.ow);
    double s = 0;
    for (int64_t iy = b.ya; iy < b.yb; ++iy)
      for (int64_t ix = b.xa; ix < b.xb; ++ix) s += double(plane[iy * g.w + ix]);
    y[e] = T(__dmul_rn(s, inv));
  }
}

template <class T>
__global__ void avg_pool_bwd(const T* dy, T* dx, PoolGeom g) {
  tide::cuda::await_prerequisite_grids();
  const int64_t per = g.h * g.w, total = g.n * g.c * per;
  const T inv = T(1.0 / double(g.kh * g.kw));
  for (int64_t e = global_index(); e < total; e += grid_stride()) {
    const int64_t p = e / per, pos = e % per, iy = pos / g.w, ix = pos % g.w;
    const T* gin = dy + p * g.oh * g.ow;
    int64_t y0, y1, x0, x1;
    covering(iy, g.ph, g.kh, g.sh, g.oh, y0, y1);
    covering(ix, g.pw, g.kw, g.sw, g.ow, x0, x1);
    T acc = T(0);
    for (int64_t oy = y0; oy < y1; ++oy)
      for (int64_t ox = x0; ox < x1; ++ox) acc += mul_rn(gin[oy * g.ow + ox], inv);
    dx[e] = acc;
  }
}

// The sum over the block of each thread's v, in a fixed tree; every thread gets it.
__device__ double block_sum(double v) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  const double total = part[0];
  __syncthreads();  // part is reused by the next call
  return total;
}

// A batch-norm entry's arguments with their pointers resolved (DataRef::get runs on the
// host): what the kernels receive.
template <class T>
struct BnFwd {
  const T *x, *w, *b;
  T *running_mean, *running_var, *y, *stats;
  int64_t n, c, s;
  bool training, has_running;
  double momentum, eps;
};
template <class T>
struct BnBwd {
  const T *dy, *x, *w, *stats;
  T *dx, *dw, *db;
  int64_t n, c, s;
  bool training;
};

// The k-th element of channel ch of x viewed as (n, c, s).
__device__ __forceinline__ int64_t at(int64_t k, int64_t ch, int64_t c, int64_t s) {
  return (k / s * c + ch) * s + k % s;
}

// Block ch normalises channel ch.
template <class T>
__global__ void batch_norm_fwd(BnFwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, s = a.s, m = a.n * s, ch = blockIdx.x;
  double mean, invstd;
  if (a.training) {
    double sum = 0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) sum += double(a.x[at(k, ch, c, s)]);
    mean = block_sum(sum) / double(m);
    double sq = 0;  // two passes: no cancellation for large means
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      const double d = double(a.x[at(k, ch, c, s)]) - mean;
      sq += __dmul_rn(d, d);
    }
    sq = block_sum(sq);
    invstd = 1.0 / sqrt(sq / double(m) + a.eps);
    if (a.has_running && threadIdx.x == 0) {
      const double mo = a.momentum;
      a.running_mean[ch] = T(__dmul_rn(1 - mo, double(a.running_mean[ch])) + __dmul_rn(mo, mean));
      a.running_var[ch] =
          T(__dmul_rn(1 - mo, double(a.running_var[ch])) + __dmul_rn(mo, sq / double(m - 1)));
    }
  } else {
    mean = double(a.running_mean[ch]);
    invstd = 1.0 / sqrt(double(a.running_var[ch]) + a.eps);
  }
  if (threadIdx.x == 0) {
    a.stats[ch] = T(mean);
    a.stats[c + ch] = T(invstd);
  }
  const double scale = __dmul_rn(invstd, double(a.w[ch]));
  const double shift = double(a.b[ch]) - __dmul_rn(mean, scale);
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = at(k, ch, c, s);
    a.y[i] = T(__dmul_rn(double(a.x[i]), scale) + shift);
  }
}

template <class T>
__global__ void batch_norm_bwd(BnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, s = a.s, m = a.n * s, ch = blockIdx.x;
  const double mean = double(a.stats[ch]), invstd = double(a.stats[c + ch]);
  double sdy = 0, sdx = 0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = at(k, ch, c, s);
    const double g = double(a.dy[i]);
    sdy += g;
    sdx += __dmul_rn(__dmul_rn(g, double(a.x[i]) - mean), invstd);
  }
  const double sum_dy = block_sum(sdy), sum_dy_xhat = block_sum(sdx);
  if (threadIdx.x == 0) {
    a.db[ch] = T(sum_dy);
    a.dw[ch] = T(sum_dy_xhat);
  }
  const double scale = __dmul_rn(double(a.w[ch]), invstd);
  // Training: the batch's mean and variance depend on x too.
  const double mean_dy = a.training ? sum_dy / double(m) : 0.0;
  const double mean_dy_xhat = a.training ? sum_dy_xhat / double(m) : 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = at(k, ch, c, s);
    const double xhat = __dmul_rn(double(a.x[i]) - mean, invstd);
    a.dx[i] = T(__dmul_rn(scale, double(a.dy[i]) - mean_dy - __dmul_rn(xhat, mean_dy_xhat)));
  }
}

int64_t planes(const PoolGeom& g) { return g.n * g.c; }

template <class T>
void max_pool2d(const KernelContext& ctx, const MaxPool2d<T>& a, const NoExtra&) {
  const int64_t total = planes(a.g) * a.g.oh * a.g.ow;
  if (total == 0) return;
  max_pool_fwd<T><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(a.x.get(), a.y.get(), a.g);
}

template <class T>
void max_pool2d_grad(const KernelContext& ctx, const MaxPool2dGrad<T>& a, const NoExtra&) {
  const int64_t total = planes(a.g) * a.g.h * a.g.w;
  if (total == 0) return;
  max_pool_bwd<T>
      <<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(a.x.get(), a.dy.get(), a.dx.get(), a.g);
}

template <class T>
void avg_pool2d(const KernelContext& ctx, const AvgPool2d<T>& a, const NoExtra&) {
  const int64_t total = planes(a.g) * a.g.oh * a.g.ow;
  if (total == 0) return;
  avg_pool_fwd<T><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(a.x.get(), a.y.get(), a.g);
}

template <class T>
void avg_pool2d_grad(const KernelContext& ctx, const AvgPool2dGrad<T>& a, const NoExtra&) {
  const int64_t total = planes(a.g) * a.g.h * a.g.w;
  if (total == 0) return;
  avg_pool_bwd<T><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(a.dy.get(), a.dx.get(), a.g);
}

// An empty batch (eval mode only: training refuses it) still runs one block per channel:
// the statistics (from the running estimates) and, in the gradient, the zero sums of
// dweight and dbias are written, as on the CPU.
template <class T>
void batch_norm(const KernelContext& ctx, const BatchNorm<T>& a, const NoExtra&) {
  if (a.c == 0) return;
  const bool running = a.has_running || !a.training;  // eval reads the running estimates
  BnFwd<T> k{a.x.get(),
             a.weight.get(),
             a.bias.get(),
             running ? a.running_mean.get() : nullptr,
             running ? a.running_var.get() : nullptr,
             a.y.get(),
             a.stats.get(),
             a.n,
             a.c,
             a.s,
             a.training,
             a.has_running,
             a.momentum,
             a.eps};
  batch_norm_fwd<T><<<unsigned(a.c), kThreads, 0, stream_of(ctx)>>>(k);
}

template <class T>
void batch_norm_grad(const KernelContext& ctx, const BatchNormGrad<T>& a, const NoExtra&) {
  if (a.c == 0) return;
  BnBwd<T> k{a.dy.get(),    a.x.get(),  a.weight.get(),
             a.stats.get(), a.dx.get(), a.dweight.get(),
             a.dbias.get(), a.n,        a.c,
             a.s,           a.training};
  batch_norm_bwd<T><<<unsigned(a.c), kThreads, 0, stream_of(ctx)>>>(k);
}

template <class T>
void register_for() {
  CudaKernel<MaxPool2d<T>, NoExtra>::fn = &max_pool2d<T>;
  CudaKernel<MaxPool2dGrad<T>, NoExtra>::fn = &max_pool2d_grad<T>;
  CudaKernel<AvgPool2d<T>, NoExtra>::fn = &avg_pool2d<T>;
  CudaKernel<AvgPool2dGrad<T>, NoExtra>::fn = &avg_pool2d_grad<T>;
  CudaKernel<BatchNorm<T>, NoExtra>::fn = &batch_norm<T>;
  CudaKernel<BatchNormGrad<T>, NoExtra>::fn = &batch_norm_grad<T>;
}

}  // namespace

void register_pool_norm(OpList& ops) {
  register_for<float>();
  register_for<double>();
  for (OpId id : {OpId::max_pool2d, OpId::max_pool2d_grad, OpId::avg_pool2d, OpId::avg_pool2d_grad,
                  OpId::batch_norm, OpId::batch_norm_grad})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
