// CUDA launchers of the normalisation entries (ops/norm_kernels.h): layer norm with a warp
// per row (kRowsPerBlock rows per block), each lane summing its strided elements in order
// and the lanes' sums added by a fixed shuffle tree, in double. The gradient's sums over
// the rows (dweight, dbias) take two kernels: one thread per (chunk of rows, column) adds
// its chunk in row order into the partials (the split of layer_norm_parts, which the CPU
// uses too), then one thread per column adds the partials in chunk order. No atomics: the
// same bits on every run; the order differs from the CPU's, so results agree with it within
// rounding. 16-bit tensors load widened, keep float statistics and round each output
// through float, as the CPU does. Compiled in CI; written without a GPU to run it on
// (tide_cuda_tests runs the layer-norm cases of tests/ops on one).
#include <cstdint>

#include "core/cuda/await_grids.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/norm_kernels.h"

namespace tide::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

// The sum over the warp of each lane's v; every lane gets the same bits (each step adds
// the same two values on both lanes of a pair).
__device__ __forceinline__ double warp_sum(double v) {
  for (int m = kWarp / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

template <class T>
struct LnFwd {
  const T *x, *w, *b;
  T* y;
  compute_t<T>* stats;
  int64_t rows, d;
  double eps;
};

template <class T>
__global__ void layer_norm_fwd(LnFwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= a.rows) return;  // a whole warp leaves together
  const int lane = int(threadIdx.x % kWarp);
  const int64_t d = a.d;
  const T* p = a.x + r * d;
  double s = 0;
  for (int64_t j = lane; j < d; j += kWarp) s += double(widen(p[j]));
  const double mean = warp_sum(s) / double(d);
  double sq = 0;  // two passes: no cancellation for rows with a large mean
  for (int64_t j = lane; j < d; j += kWarp) {
    const double c = double(widen(p[j])) - mean;
    sq += c * c;
  }
  const double rstd = 1.0 / sqrt(warp_sum(sq) / double(d) + a.eps);
  if (lane == 0) {
    a.stats[r] = compute_t<T>(mean);
    a.stats[a.rows + r] = compute_t<T>(rstd);
  }
  T* q = a.y + r * d;
  for (int64_t j = lane; j < d; j += kWarp) {
    double v = (double(widen(p[j])) - mean) * rstd;
    if (a.w) v *= double(widen(a.w[j]));
    if (a.b) v += double(widen(a.b[j]));
    q[j] = half_convert<T>(v);
  }
}

template <class T>
struct LnBwd {
  const T *dy, *x, *w;
  const compute_t<T>* stats;
  T *dx, *dw, *db;
  double* parts;
  int64_t rows, d;
  RowParts split;
};

// dx, a warp per row.
template <class T>
__global__ void layer_norm_bwd_rows(LnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= a.rows) return;
  const int lane = int(threadIdx.x % kWarp);
  const int64_t d = a.d;
  const T* xr = a.x + r * d;
  const T* gr = a.dy + r * d;
  const double mean = double(a.stats[r]), rstd = double(a.stats[a.rows + r]);
  double sg = 0, sgx = 0;
  for (int64_t j = lane; j < d; j += kWarp) {
    const double g = a.w ? double(widen(gr[j])) * double(widen(a.w[j])) : double(widen(gr[j]));
    sg += g;
    sgx += g * ((double(widen(xr[j])) - mean) * rstd);
  }
  const double mean_g = warp_sum(sg) / double(d), mean_gx = warp_sum(sgx) / double(d);
  T* q = a.dx + r * d;
  for (int64_t j = lane; j < d; j += kWarp) {
    const double g = a.w ? double(widen(gr[j])) * double(widen(a.w[j])) : double(widen(gr[j]));
    const double xhat = (double(widen(xr[j])) - mean) * rstd;
    q[j] = half_convert<T>(rstd * (g - mean_g - xhat * mean_gx));
  }
}

// The partials of chunk blockIdx.y: thread j of the grid's x sums column j over the chunk's
// rows in order (reads coalesced along the row).
template <class T>
__global__ void layer_norm_bwd_parts(LnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t j = global_index(), c = blockIdx.y, d = a.d;
  if (j >= d) return;
  const int64_t r0 = c * a.split.chunk;
  const int64_t r1 = r0 + a.split.chunk < a.rows ? r0 + a.split.chunk : a.rows;
  double sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const double g = double(widen(a.dy[r * d + j]));
    sw += g * ((double(widen(a.x[r * d + j])) - double(a.stats[r])) * double(a.stats[a.rows + r]));
    sb += g;
  }
  a.parts[c * 2 * d + j] = sw;
  a.parts[c * 2 * d + d + j] = sb;
}

// dweight and dbias: each column's partials added in chunk order.
template <class T>
__global__ void layer_norm_bwd_finish(LnBwd<T> a) {
  tide::cuda::await_prerequisite_grids();
  const int64_t j = global_index(), d = a.d;
  if (j >= d) return;
  double sw = 0, sb = 0;
  for (int64_t c = 0; c < a.split.parts; ++c) {
    sw += a.parts[c * 2 * d + j];
    sb += a.parts[c * 2 * d + d + j];
  }
  a.dw[j] = half_convert<T>(sw);
  a.db[j] = half_convert<T>(sb);
}

template <class T>
void layer_norm(const KernelContext& ctx, const LayerNorm<T>& a, const NoExtra&) {
  if (a.rows == 0 || a.d == 0) return;
  LnFwd<T> k{a.x.get(),
             a.has_weight ? a.weight.get() : nullptr,
             a.has_bias ? a.bias.get() : nullptr,
             a.y.get(),
             a.stats.get(),
             a.rows,
             a.d,
             a.eps};
  layer_norm_fwd<T><<<row_blocks(a.rows), kThreads, 0, stream_of(ctx)>>>(k);
}

template <class T>
void layer_norm_grad(const KernelContext& ctx, const LayerNormGrad<T>& a, const NoExtra&) {
  if (a.d == 0) return;
  LnBwd<T> k{a.dy.get(),
             a.x.get(),
             a.has_weight ? a.weight.get() : nullptr,
             a.stats.get(),
             a.dx.get(),
             a.param_grads ? a.dweight.get() : nullptr,
             a.param_grads ? a.dbias.get() : nullptr,
             a.param_grads ? a.parts.get() : nullptr,
             a.rows,
             a.d,
             a.split};
  cudaStream_t s = stream_of(ctx);
  if (a.rows > 0) layer_norm_bwd_rows<T><<<row_blocks(a.rows), kThreads, 0, s>>>(k);
  if (!a.param_grads) return;
  // An empty batch still writes zero sums, as on the CPU.
  const unsigned col_blocks = unsigned((a.d + kThreads - 1) / kThreads);
  layer_norm_bwd_parts<T><<<dim3(col_blocks, unsigned(a.split.parts)), kThreads, 0, s>>>(k);
  layer_norm_bwd_finish<T><<<col_blocks, kThreads, 0, s>>>(k);
}

template <class T>
void register_for() {
  CudaKernel<LayerNorm<T>, NoExtra>::fn = &layer_norm<T>;
  CudaKernel<LayerNormGrad<T>, NoExtra>::fn = &layer_norm_grad<T>;
}

}  // namespace

void register_norm(OpList& ops) {
  register_for<float>();
  register_for<double>();
  register_for<bfloat16>();
  register_for<float16>();
  for (OpId id : {OpId::layer_norm, OpId::layer_norm_grad}) ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
