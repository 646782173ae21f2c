// CUDA launchers of the row entries of the linear-algebra family (ops/linalg_kernels.h):
// the 2-D transpose (32 x 32 shared-memory tiles), the axis swap (one thread per output
// element), the row-wise softmax / log_softmax (a warp per row up to kWarpRowMax elements,
// a block per row above) and the cross-entropy rows and their gradient. The softmax follows
// ops/cpu/linalg.cpp's formulas: the max in T (in float for 16-bit rows), then
// exp(double(x - max)) summed in double.
// Every reduction has a fixed order (sequential per thread, then a fixed shuffle tree), so
// results are bit-identical from run to run; the order differs from the CPU's sequential
// sum, which moves the double sum by a few ulps of double. Does not use cuDNN.
#include <math_constants.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/await_grids.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/linalg_kernels.h"

namespace tide::kernels::cuda {

namespace {

constexpr int kWarp = 32;

// ---- transpose ------------------------------------------------------------------------

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // a 32 x 8 block moves a 32 x 32 tile in 4 passes

// y (cols x rows) = a (rows x cols)^T. Each block walks tiles grid-stride in both
// dimensions (rows may exceed gridDim.y's 65535 tiles). Reads and writes are coalesced
// along threadIdx.x; the +1 column keeps the tile's column reads free of bank conflicts.
template <class T>
__global__ void transpose_tiles(const T* a, T* y, int64_t rows, int64_t cols) {
  tide::cuda::await_prerequisite_grids();
  __shared__ T tile[kTile][kTile + 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  for (int64_t ty = blockIdx.y; ty < row_tiles; ty += gridDim.y) {
    for (int64_t tx = blockIdx.x; tx < col_tiles; tx += gridDim.x) {
      const int64_t r0 = ty * kTile, c0 = tx * kTile;
      for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        int64_t r = r0 + j, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[j][threadIdx.x] = a[r * cols + c];
      }
      __syncthreads();
      for (int j = threadIdx.y; j < kTile; j += kTileRows) {
        int64_t c = c0 + j, r = r0 + threadIdx.x;
        if (c < cols && r < rows) y[c * rows + r] = tile[threadIdx.x][j];
      }
      __syncthreads();  // the tile is reloaded by the next iteration
    }
  }
}

// y[o, j, m, i, e] = a[o, i, m, j, e] (SwapAxes): one thread per output element,
// grid-stride; writes are coalesced, reads are coalesced along the inner run.
template <class T>
__global__ void swap_axes_elements(const T* a, T* y, int64_t n, int64_t n1, int64_t mid, int64_t n2,
                                   int64_t inner) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    y[idx] = a[swap_axes_source_run(idx / inner, n1, mid, n2) * inner + idx % inner];
  }
}

// ---- softmax rows ---------------------------------------------------------------------

constexpr int64_t kWarpRowMax = 1024;             // rows up to this length: one warp each
constexpr int kWarpsPerBlock = kThreads / kWarp;  // the warp kernel: rows per block

template <class T>
__device__ __forceinline__ T max_of(T a, T b) {
  return b > a ? b : a;
}

// Butterfly reductions over a warp: every lane ends with the same value (each step adds or
// compares the same two operands on both lanes of a pair, and + is commutative).
template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v = max_of(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Writes row r's outputs from its max m and its sum of exp(x - m); lanes (or threads)
// `first`, `first + step`, ... as in the reductions.
// 16-bit rows compute in float (R = compute_t<T>) and round each output once, as the CPU.
template <class T, class R = compute_t<T>>
__device__ __forceinline__ void write_row(const T* xr, T* yr, int64_t n, int64_t first,
                                          int64_t step, R m, double sum, bool log_out) {
  if (log_out) {
    const R ls = R(log(sum));
    for (int64_t i = first; i < n; i += step) yr[i] = T(widen(xr[i]) - m - ls);
  } else {
    const double inv = 1.0 / sum;
    for (int64_t i = first; i < n; i += step)
      yr[i] = half_convert<T>(exp(double(widen(xr[i]) - m)) * inv);
  }
}

// One warp per row (n <= kWarpRowMax), kWarpsPerBlock rows per block, grid-stride over rows.
template <class T>
__global__ void softmax_warp_rows(const T* x, T* y, int64_t rows, int64_t n, bool log_out) {
  tide::cuda::await_prerequisite_grids();
  const int lane = threadIdx.x % kWarp;
  const int64_t first_row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t row_stride = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = first_row; r < rows; r += row_stride) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    compute_t<T> m = widen(xr[0]);  // every lane starts from an element: no identity needed
    for (int64_t i = lane; i < n; i += kWarp) m = max_of(m, widen(xr[i]));
    m = warp_max(m);
    double sum = 0;
    for (int64_t i = lane; i < n; i += kWarp) sum += exp(double(widen(xr[i]) - m));
    sum = warp_sum(sum);
    write_row(xr, yr, n, lane, kWarp, m, sum, log_out);
  }
}

// Reduces v over the block with op: a butterfly in each warp, then every warp runs the
// same butterfly over the kWarpsPerBlock partial results (lanes past them take op's
// identity), so every thread returns the same value in a fixed order. `partial` is shared
// scratch of kWarpsPerBlock elements, free again when this returns.
template <class V, class Op>
__device__ __forceinline__ V block_reduce(V v, V* partial, Op op) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  V w = lane < kWarpsPerBlock ? partial[lane] : op.identity(partial[0]);
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) w = op(w, __shfl_xor_sync(0xffffffffu, w, off));
  __syncthreads();  // every thread has read partial before a later call overwrites it
  return w;
}

// The identities: zero for the sum; for the max any element of the row (max is idempotent).
template <class T>
struct MaxOp {
  __device__ T operator()(T a, T b) const { return max_of(a, b); }
  __device__ T identity(T any_element) const { return any_element; }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
  __device__ double identity(double) const { return 0.0; }
};

// One block (kThreads threads) per row (n > kWarpRowMax, so every thread has elements),
// grid-stride over rows.
template <class T>
__global__ void softmax_block_rows(const T* x, T* y, int64_t rows, int64_t n, bool log_out) {
  tide::cuda::await_prerequisite_grids();
  using R = compute_t<T>;
  __shared__ R max_partial[kWarpsPerBlock];
  __shared__ double sum_partial[kWarpsPerBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    R m = widen(xr[threadIdx.x]);
    for (int64_t i = threadIdx.x + kThreads; i < n; i += kThreads) m = max_of(m, widen(xr[i]));
    m = block_reduce(m, max_partial, MaxOp<R>{});
    double sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += exp(double(widen(xr[i]) - m));
    sum = block_reduce(sum, sum_partial, SumOp{});
    write_row(xr, yr, n, threadIdx.x, kThreads, m, sum, log_out);
  }
}

// ---- cross-entropy rows ---------------------------------------------------------------

// One block per row, grid-stride over rows (any row length: threads past the row start
// from its first element, which the max ignores and the sum skips). Thread 0 writes the
// row's log-sum-exp and loss; a label outside [0, n) makes the loss NaN (a kernel cannot
// throw; the CPU entry fails the op instead).
template <class T, class L>
__global__ void cross_entropy_block_rows(const T* x, const L* labels, T* loss, compute_t<T>* lse,
                                         int64_t rows, int64_t n) {
  tide::cuda::await_prerequisite_grids();
  using R = compute_t<T>;  // 16-bit logits: float, as the CPU
  __shared__ R max_partial[kWarpsPerBlock];
  __shared__ double sum_partial[kWarpsPerBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    R m = widen(xr[threadIdx.x < n ? threadIdx.x : 0]);
    for (int64_t i = threadIdx.x + kThreads; i < n; i += kThreads) m = max_of(m, widen(xr[i]));
    m = block_reduce(m, max_partial, MaxOp<R>{});
    double sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += exp(double(widen(xr[i]) - m));
    sum = block_reduce(sum, sum_partial, SumOp{});
    if (threadIdx.x == 0) {
      const double ls = double(m) + log(sum);
      const int64_t v = int64_t(labels[r]);
      lse[r] = R(ls);
      loss[r] = v < 0 || v >= n ? half_convert<T>(CUDART_NAN)
                                : half_convert<T>(ls - double(widen(xr[v])));
    }
  }
}

// dx = (exp(x - lse[row]) - one-hot) * g[row], one thread per element, grid-stride; a
// label outside [0, n) makes its row NaN.
template <class T, class L>
__global__ void cross_entropy_grad_elements(const T* x, const compute_t<T>* lse, const T* g,
                                            const L* labels, T* dx, int64_t rows, int64_t n) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n, v = int64_t(labels[r]);
    const double p = exp(double(widen(x[i])) - double(lse[r]));
    dx[i] = v < 0 || v >= n ? half_convert<T>(CUDART_NAN)
                            : half_convert<T>((v == c ? p - 1.0 : p) * double(widen(g[r])));
  }
}

// ---- entries --------------------------------------------------------------------------

template <class T, class L>
void cross_entropy_rows(const KernelContext& ctx, const CrossEntropyRows<T, L>& c, const NoExtra&) {
  if (c.rows == 0 || c.classes == 0) return;
  cross_entropy_block_rows<T, L>
      <<<unsigned(std::min<int64_t>(c.rows, int64_t(1) << 20)), kThreads, 0, stream_of(ctx)>>>(
          c.x.get(), c.labels.get(), c.loss.get(), c.lse.get(), c.rows, c.classes);
}

template <class T, class L>
void cross_entropy_grad(const KernelContext& ctx, const CrossEntropyGrad<T, L>& c, const NoExtra&) {
  const int64_t n = c.rows * c.classes;
  if (n == 0) return;
  cross_entropy_grad_elements<T, L><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(
      c.x.get(), c.lse.get(), c.g.get(), c.labels.get(), c.dx.get(), c.rows, c.classes);
}

template <class T>
void transpose(const KernelContext& ctx, const Transpose<T>& t, const NoExtra&) {
  if (t.rows == 0 || t.cols == 0) return;
  const int64_t row_tiles = (t.rows + kTile - 1) / kTile;
  const int64_t col_tiles = (t.cols + kTile - 1) / kTile;
  dim3 grid(unsigned(std::min<int64_t>(col_tiles, int64_t(1) << 20)),
            unsigned(std::min<int64_t>(row_tiles, 65535)));
  transpose_tiles<T>
      <<<grid, dim3(kTile, kTileRows), 0, stream_of(ctx)>>>(t.a.get(), t.y.get(), t.rows, t.cols);
}

template <class T>
void swap_axes(const KernelContext& ctx, const SwapAxes<T>& t, const NoExtra&) {
  const int64_t n = t.outer * t.n1 * t.mid * t.n2 * t.inner;
  if (n == 0) return;
  swap_axes_elements<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(t.a.get(), t.y.get(), n,
                                                                        t.n1, t.mid, t.n2, t.inner);
}

template <class T>
void softmax_rows(const KernelContext& ctx, const SoftmaxRows<T>& s, const NoExtra&) {
  if (s.rows == 0 || s.n == 0) return;
  const T* x = s.x.get();
  T* y = s.y.get();
  if (s.n <= kWarpRowMax) {
    int64_t blocks = (s.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    softmax_warp_rows<T>
        <<<unsigned(std::min<int64_t>(blocks, int64_t(1) << 20)), kThreads, 0, stream_of(ctx)>>>(
            x, y, s.rows, s.n, s.log);
  } else {
    softmax_block_rows<T>
        <<<unsigned(std::min<int64_t>(s.rows, int64_t(1) << 20)), kThreads, 0, stream_of(ctx)>>>(
            x, y, s.rows, s.n, s.log);
  }
}

template <class T>
void register_half_cross_entropy() {
  CudaKernel<CrossEntropyRows<T, int32_t>, NoExtra>::fn = &cross_entropy_rows<T, int32_t>;
  CudaKernel<CrossEntropyRows<T, int64_t>, NoExtra>::fn = &cross_entropy_rows<T, int64_t>;
  CudaKernel<CrossEntropyGrad<T, int32_t>, NoExtra>::fn = &cross_entropy_grad<T, int32_t>;
  CudaKernel<CrossEntropyGrad<T, int64_t>, NoExtra>::fn = &cross_entropy_grad<T, int64_t>;
}

}  // namespace

void register_rows(OpList& ops) {
  CudaKernel<Transpose<float>, NoExtra>::fn = &transpose<float>;
  CudaKernel<Transpose<double>, NoExtra>::fn = &transpose<double>;
  CudaKernel<Transpose<int32_t>, NoExtra>::fn = &transpose<int32_t>;
  CudaKernel<Transpose<int64_t>, NoExtra>::fn = &transpose<int64_t>;
  CudaKernel<SwapAxes<float>, NoExtra>::fn = &swap_axes<float>;
  CudaKernel<SwapAxes<double>, NoExtra>::fn = &swap_axes<double>;
  CudaKernel<SwapAxes<int32_t>, NoExtra>::fn = &swap_axes<int32_t>;
  CudaKernel<SwapAxes<int64_t>, NoExtra>::fn = &swap_axes<int64_t>;
  CudaKernel<Transpose<bfloat16>, NoExtra>::fn = &transpose<bfloat16>;
  CudaKernel<Transpose<float16>, NoExtra>::fn = &transpose<float16>;
  CudaKernel<SwapAxes<bfloat16>, NoExtra>::fn = &swap_axes<bfloat16>;
  CudaKernel<SwapAxes<float16>, NoExtra>::fn = &swap_axes<float16>;
  CudaKernel<SoftmaxRows<float>, NoExtra>::fn = &softmax_rows<float>;
  CudaKernel<SoftmaxRows<double>, NoExtra>::fn = &softmax_rows<double>;
  CudaKernel<SoftmaxRows<bfloat16>, NoExtra>::fn = &softmax_rows<bfloat16>;
  CudaKernel<SoftmaxRows<float16>, NoExtra>::fn = &softmax_rows<float16>;
  CudaKernel<CrossEntropyRows<float, int32_t>, NoExtra>::fn = &cross_entropy_rows<float, int32_t>;
  CudaKernel<CrossEntropyRows<float, int64_t>, NoExtra>::fn = &cross_entropy_rows<float, int64_t>;
  CudaKernel<CrossEntropyRows<double, int32_t>, NoExtra>::fn = &cross_entropy_rows<double, int32_t>;
  CudaKernel<CrossEntropyRows<double, int64_t>, NoExtra>::fn = &cross_entropy_rows<double, int64_t>;
  CudaKernel<CrossEntropyGrad<float, int32_t>, NoExtra>::fn = &cross_entropy_grad<float, int32_t>;
  CudaKernel<CrossEntropyGrad<float, int64_t>, NoExtra>::fn = &cross_entropy_grad<float, int64_t>;
  CudaKernel<CrossEntropyGrad<double, int32_t>, NoExtra>::fn = &cross_entropy_grad<double, int32_t>;
  CudaKernel<CrossEntropyGrad<double, int64_t>, NoExtra>::fn = &cross_entropy_grad<double, int64_t>;
  register_half_cross_entropy<bfloat16>();
  register_half_cross_entropy<float16>();
  for (OpId id : {OpId::transpose, OpId::swap_axes, OpId::softmax, OpId::log_softmax,
                  OpId::cross_entropy, OpId::cross_entropy_grad})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
