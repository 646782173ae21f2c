// CUDA launchers of the pooling and batch-norm entries (ops/conv_kernels.h): tide's own
// kernels, not cuDNN's.
//   - Pooling: one thread per output (forward) or per input element (gradients). The
//     windows and the maximum come from ops/pool_window.h, which the CPU loops use too, and
//     each input's gradient adds its windows' contributions in the CPU's order (rows, then
//     columns), so results equal the CPU's bit for bit, with no atomics. cuDNN's pooling
//     backward needs the forward's output, which tide's gradient op does not keep, and it
//     may pick another maximum among ties than the CPU.
//   - Batch norm: the per-channel sums in double, split over (channel, chunk) blocks and
//     finished per channel (ops/channel_parts.h), over a fixed tree (the same bits every
//     run, not the CPU's order, so within rounding of the CPU); normalisation and dx are
//     grid-stride passes over every element.
// Products are rounded before they are added (__dmul_rn, __fmul_rn), as on the CPU, where
// they are never fused into an FMA. Compiled in CI; written without a GPU to run it on
// (scripts/gpu_check.sh runs the pooling and batch-norm cases of tests/ops on one).
#include <cstdint>
#include <type_traits>

#include "core/cuda/await_grids.h"
#include "ops/channel_parts.h"
#include "ops/conv_kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/cuda/scratch.h"
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
// host), and its scratch: what the kernels receive. The sums split each channel into
// chunks (ops/channel_parts.h): one block per (channel, chunk) writes a partial sum, one
// block per channel adds them in chunk order, then a grid-stride pass over every element
// normalises (or forms dx). A fixed tree throughout: the same bits every run.
template <class T>
struct BnFwd {
  const T *x, *w, *b;
  T *running_mean, *running_var, *y, *stats;
  int64_t n, c, s;
  bool training, has_running;
  double momentum, eps;
  ChannelParts split;
  double *partial, *mean, *scale, *shift;  // scratch: c * parts, then c each
};
template <class T>
struct BnBwd {
  const T *dy, *x, *w, *stats;
  T *dx, *dw, *db;
  int64_t n, c, s;
  bool training;
  ChannelParts split;
  double *partial, *scale, *mean_dy, *mean_dy_xhat;  // scratch: 2 * c * parts, then c each
};

// The k-th element of channel ch of x viewed as (n, c, s).
__device__ __forceinline__ int64_t at(int64_t k, int64_t ch, int64_t c, int64_t s) {
  return (k / s * c + ch) * s + k % s;
}

// Block (ch, p): the sum over chunk p of channel ch of x, or of (x - mean[ch])^2 when `sq`.
template <class T>
__global__ void batch_norm_partial(BnFwd<T> a, bool sq) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, s = a.s, m = a.n * s, ch = blockIdx.x, p = blockIdx.y;
  const int64_t lo = p * a.split.chunk, hi = lo + a.split.chunk < m ? lo + a.split.chunk : m;
  const double mean = sq ? a.mean[ch] : 0.0;
  double v = 0;
  for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
    const double d = double(a.x[at(k, ch, c, s)]) - mean;
    v += sq ? __dmul_rn(d, d) : d;  // two passes: no cancellation for large means
  }
  v = block_sum(v);
  if (threadIdx.x == 0) a.partial[ch * a.split.parts + p] = v;
}

// The sum of channel ch's partials in chunk order (a fixed tree over the block).
__device__ double channel_total(const double* partial, int64_t parts, int64_t ch) {
  double v = 0;
  for (int64_t p = threadIdx.x; p < parts; p += blockDim.x) v += partial[ch * parts + p];
  return block_sum(v);
}

// Block ch: the mean (after the first partial pass).
template <class T>
__global__ void batch_norm_mean(BnFwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t ch = blockIdx.x;
  const double total = channel_total(a.partial, a.split.parts, ch);
  if (threadIdx.x == 0) a.mean[ch] = total / double(a.n * a.s);
}

// Block ch: 1/std (training: from the second partial pass; eval: the running estimates),
// the running estimates' update, the stats the backward reads, and the scale and shift.
template <class T>
__global__ void batch_norm_finish(BnFwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, m = a.n * a.s, ch = blockIdx.x;
  double mean, invstd;
  if (a.training) {
    const double sq = channel_total(a.partial, a.split.parts, ch);
    mean = a.mean[ch];
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
    const double scale = __dmul_rn(invstd, double(a.w[ch]));
    a.scale[ch] = scale;
    a.shift[ch] = double(a.b[ch]) - __dmul_rn(mean, scale);
  }
}

// Every element: y = x * scale[ch] + shift[ch].
template <class T>
__global__ void batch_norm_apply(BnFwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t total = a.n * a.c * a.s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = i / a.s % a.c;
    a.y[i] = T(__dmul_rn(double(a.x[i]), a.scale[ch]) + a.shift[ch]);
  }
}

// Block (ch, p): chunk p's sums of dy and of dy * xhat.
template <class T>
__global__ void batch_norm_grad_partial(BnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, s = a.s, m = a.n * s, ch = blockIdx.x, p = blockIdx.y;
  const int64_t lo = p * a.split.chunk, hi = lo + a.split.chunk < m ? lo + a.split.chunk : m;
  const double mean = double(a.stats[ch]), invstd = double(a.stats[c + ch]);
  double sdy = 0, sdx = 0;
  for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
    const int64_t i = at(k, ch, c, s);
    const double g = double(a.dy[i]);
    sdy += g;
    sdx += __dmul_rn(__dmul_rn(g, double(a.x[i]) - mean), invstd);
  }
  sdy = block_sum(sdy);
  sdx = block_sum(sdx);
  if (threadIdx.x == 0) {
    a.partial[2 * (ch * a.split.parts + p)] = sdy;
    a.partial[2 * (ch * a.split.parts + p) + 1] = sdx;
  }
}

// Block ch: dbias, dweight and what dx needs of them.
template <class T>
__global__ void batch_norm_grad_finish(BnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, m = a.n * a.s, ch = blockIdx.x, parts = a.split.parts;
  double sdy = 0, sdx = 0;
  for (int64_t p = threadIdx.x; p < parts; p += blockDim.x) {
    sdy += a.partial[2 * (ch * parts + p)];
    sdx += a.partial[2 * (ch * parts + p) + 1];
  }
  const double sum_dy = block_sum(sdy), sum_dy_xhat = block_sum(sdx);
  if (threadIdx.x == 0) {
    a.db[ch] = T(sum_dy);
    a.dw[ch] = T(sum_dy_xhat);
    a.scale[ch] = __dmul_rn(double(a.w[ch]), double(a.stats[c + ch]));
    // Training: the batch's mean and variance depend on x too.
    a.mean_dy[ch] = a.training && m > 0 ? sum_dy / double(m) : 0.0;
    a.mean_dy_xhat[ch] = a.training && m > 0 ? sum_dy_xhat / double(m) : 0.0;
  }
}

// Every element: dx.
template <class T>
__global__ void batch_norm_grad_apply(BnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t c = a.c, total = a.n * c * a.s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = i / a.s % c;
    const double xhat = __dmul_rn(double(a.x[i]) - double(a.stats[ch]), double(a.stats[c + ch]));
    a.dx[i] = T(__dmul_rn(a.scale[ch],
                          double(a.dy[i]) - a.mean_dy[ch] - __dmul_rn(xhat, a.mean_dy_xhat[ch])));
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

// An empty batch (eval mode only: training refuses it) still runs the per-channel blocks:
// the statistics (from the running estimates) and, in the gradient, the zero sums of
// dweight and dbias are written, as on the CPU.
template <class T>
void batch_norm(const KernelContext& ctx, const BatchNorm<T>& a, const NoExtra&) {
  if (a.c == 0) return;
  const bool running = a.has_running || !a.training;  // eval reads the running estimates
  const ChannelParts split = channel_parts(a.n * a.s, a.c);
  StorageRef keep;
  auto* scratch_d = static_cast<double*>(
      scratch(ctx, size_t(a.c * (split.parts + 3)) * sizeof(double), keep, "batch_norm"));
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
             a.eps,
             split,
             scratch_d,
             scratch_d + a.c * split.parts,
             scratch_d + a.c * (split.parts + 1),
             scratch_d + a.c * (split.parts + 2)};
  cudaStream_t st = stream_of(ctx);
  const dim3 chunks(unsigned(a.c), unsigned(split.parts));  // parts <= kMaxParts: a y extent
  if (a.training) {
    batch_norm_partial<T><<<chunks, kThreads, 0, st>>>(k, false);
    batch_norm_mean<T><<<unsigned(a.c), kThreads, 0, st>>>(k);
    batch_norm_partial<T><<<chunks, kThreads, 0, st>>>(k, true);
  }
  batch_norm_finish<T><<<unsigned(a.c), kThreads, 0, st>>>(k);
  const int64_t total = a.n * a.c * a.s;
  if (total > 0) batch_norm_apply<T><<<blocks_for(total), kThreads, 0, st>>>(k);
}

template <class T>
void batch_norm_grad(const KernelContext& ctx, const BatchNormGrad<T>& a, const NoExtra&) {
  if (a.c == 0) return;
  const ChannelParts split = channel_parts(a.n * a.s, a.c);
  StorageRef keep;
  auto* scratch_d = static_cast<double*>(
      scratch(ctx, size_t(a.c * (2 * split.parts + 3)) * sizeof(double), keep, "batch_norm_grad"));
  BnBwd<T> k{a.dy.get(),
             a.x.get(),
             a.weight.get(),
             a.stats.get(),
             a.dx.get(),
             a.dweight.get(),
             a.dbias.get(),
             a.n,
             a.c,
             a.s,
             a.training,
             split,
             scratch_d,
             scratch_d + 2 * a.c * split.parts,
             scratch_d + a.c * (2 * split.parts + 1),
             scratch_d + a.c * (2 * split.parts + 2)};
  cudaStream_t st = stream_of(ctx);
  batch_norm_grad_partial<T><<<dim3(unsigned(a.c), unsigned(split.parts)), kThreads, 0, st>>>(k);
  batch_norm_grad_finish<T><<<unsigned(a.c), kThreads, 0, st>>>(k);
  const int64_t total = a.n * a.c * a.s;
  if (total > 0) batch_norm_grad_apply<T><<<blocks_for(total), kThreads, 0, st>>>(k);
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
