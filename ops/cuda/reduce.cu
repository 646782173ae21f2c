// CUDA launcher of the reduction entry (ops/reduce_kernels.h). The input is [outer, n,
// inner], reduced over n. Contiguous rows of at least kMinCubRow elements (inner == 1) go
// to CUB: DeviceReduce for a full reduction, DeviceSegmentedReduce (one segment per outer
// row) otherwise, and a few long rows are cut into chunks, one segment each, whose partial
// results are then combined per row in chunk order (ops/channel_parts.h, row_parts).
// Everything else (inner > 1, short rows, n == 0) runs one thread per output that loops
// over k in order, exactly as the CPU does, except long columns: with few outputs each
// column is split over several threads (column_parts) and the parts combined in order.
// max/argmax combine with MaxFirst (ops/max_first.h), whose total order makes any split
// give the CPU's first NaN, else first maximum. No atomics anywhere, so the result depends
// only on the shape and the device.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>

#include <cstdint>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/allocator.h"
#include "core/cuda/await_grids.h"
#include "ops/channel_parts.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/cuda/scratch.h"
#include "ops/max_first.h"
#include "ops/reduce_kernels.h"

namespace tide::kernels::cuda {

namespace {

// Shorter rows take the per-thread kernel: a CUB block per row would mostly idle.
constexpr int64_t kMinCubRow = 128;

template <class T>
using Acc = SumAcc<T>;

// ---- functors for CUB -----------------------------------------------------------------

template <class T>
struct ToAcc {
  __host__ __device__ Acc<T> operator()(T v) const { return Acc<T>(widen(v)); }
};

// x * x in the accumulator (sum_squares).
template <class T>
struct ToAccSquare {
  __host__ __device__ Acc<T> operator()(T v) const {
    const Acc<T> a = Acc<T>(widen(v));
    return a * a;
  }
};

// Any operands CUB pairs with the accumulator (it also names the output iterator's value
// type, 16-bit for 16-bit sums, when it deduces the accumulator) are widened first.
template <class T>
struct Plus {
  template <class U, class V>
  __host__ __device__ T operator()(const U& a, const V& b) const {
    return T(widen(a)) + T(widen(b));
  }
};

// The CPU's last step: O(s), or O(double(s) * (1 / n)) for a mean.
template <class A, class O>
struct FinishSum {
  bool mean;
  double scale;
  __host__ __device__ O operator()(A s) const {
    return mean ? half_convert<O>(acc_to_double(s) * scale) : half_convert<O>(s);
  }
};

// An element (widened: 16-bit values compare as float) and its flat index in the input.
template <class T>
struct MakeValIdx {
  const T* x;
  __host__ __device__ ValIdx<compute_t<T>> operator()(int64_t j) const { return {widen(x[j]), j}; }
};

// Writes row o's result: the value (max) or its index within the row (argmax).
template <class T, class O>
struct StoreMax {
  O* y;
  int64_t n;
  bool arg;
  __host__ __device__ void operator()(int64_t o, const ValIdx<compute_t<T>>& r) const {
    y[o] = arg ? O(r.i - o * n) : O(r.v);
  }
};

struct RowStart {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t o) const { return o * n; }
};

// CUB's segment offsets for rows of n elements cut by `split` (ops/channel_parts.h).
struct ChunkOffsets {
  thrust::transform_iterator<ChunkBegin, thrust::counting_iterator<int64_t>> begin;
  thrust::transform_iterator<ChunkEnd, thrust::counting_iterator<int64_t>> end;
};
ChunkOffsets chunk_offsets(int64_t n, ChannelParts split) {
  return {{thrust::counting_iterator<int64_t>(0), ChunkBegin{n, split}},
          {thrust::counting_iterator<int64_t>(0), ChunkEnd{n, split}}};
}

// ---- per-thread kernels (any geometry; the CPU's loops) -------------------------------

template <class T, class O>
__global__ void sum_kernel(const T* x, O* y, ReduceGeometry g, bool mean, double scale) {
  tide::cuda::await_prerequisite_grids();
  const int64_t outputs = g.outer * g.inner;
  for (int64_t j = global_index(); j < outputs; j += grid_stride()) {
    const int64_t o = j / g.inner, i = j - o * g.inner;
    const T* p = x + o * g.n * g.inner + i;
    Acc<T> s = 0;
    for (int64_t k = 0; k < g.n; ++k) s += Acc<T>(widen(p[k * g.inner]));
    y[j] = mean ? half_convert<O>(acc_to_double(s) * scale) : half_convert<O>(s);
  }
}

template <class T, class O>
__global__ void max_kernel(const T* x, O* y, ReduceGeometry g, bool arg) {
  tide::cuda::await_prerequisite_grids();
  const int64_t outputs = g.outer * g.inner;
  for (int64_t j = global_index(); j < outputs; j += grid_stride()) {
    const int64_t o = j / g.inner, i = j - o * g.inner;
    const T* p = x + o * g.n * g.inner + i;
    compute_t<T> best = widen(p[0]);
    int64_t at = 0;
    for (int64_t k = 1; k < g.n && !is_nan_value(best); ++k) {
      const compute_t<T> v = widen(p[k * g.inner]);
      if (v > best || is_nan_value(v)) {
        best = v;
        at = k;
      }
    }
    y[j] = arg ? O(at) : O(best);
  }
}

// A sum down long strided columns (inner > 1, few outputs): thread (p, j) adds chunk p of
// output j's column in order into partial[p * outputs + j] (adjacent threads read adjacent
// columns), then one thread per output adds its partials in chunk order. A fixed tree: the
// same bits every run (not the CPU's single pass: within rounding of it).
// Thread t's chunk of a split column (t = p * outputs + j: chunk p of output j): the
// offset of the column's first element, and the chunk's range [lo, hi) along n.
struct ColumnChunk {
  int64_t column, lo, hi;
};
__device__ __forceinline__ ColumnChunk column_chunk(int64_t t, int64_t outputs, ReduceGeometry g,
                                                    ChannelParts split) {
  const int64_t p = t / outputs, j = t - p * outputs;
  const int64_t o = j / g.inner, i = j - o * g.inner;
  const int64_t lo = p * split.chunk, hi = lo + split.chunk < g.n ? lo + split.chunk : g.n;
  return {o * g.n * g.inner + i, lo, hi};
}

template <class T>
__global__ void column_partial_sums(const T* x, Acc<T>* partial, ReduceGeometry g,
                                    ChannelParts split) {
  tide::cuda::await_prerequisite_grids();
  const int64_t outputs = g.outer * g.inner, total = outputs * split.parts;
  for (int64_t t = global_index(); t < total; t += grid_stride()) {
    const ColumnChunk c = column_chunk(t, outputs, g, split);
    const T* col = x + c.column;
    Acc<T> s = 0;
    for (int64_t k = c.lo; k < c.hi; ++k) s += Acc<T>(widen(col[k * g.inner]));
    partial[t] = s;
  }
}

template <class T, class O>
__global__ void column_finish(const Acc<T>* partial, O* y, int64_t outputs, int64_t parts,
                              bool mean, double scale) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t j = global_index(); j < outputs; j += grid_stride()) {
    Acc<T> s = 0;
    for (int64_t p = 0; p < parts; ++p) s += partial[p * outputs + j];
    y[j] = mean ? half_convert<O>(acc_to_double(s) * scale) : half_convert<O>(s);
  }
}

// max/argmax down long strided columns: thread (p, j) finds chunk p's first NaN, else first
// maximum, of output j's column (index k within the column), then one thread per output
// combines its parts with MaxFirst and writes the value or the index.
template <class T>
__global__ void column_partial_max(const T* x, ValIdx<compute_t<T>>* partial, ReduceGeometry g,
                                   ChannelParts split) {
  tide::cuda::await_prerequisite_grids();
  const int64_t outputs = g.outer * g.inner, total = outputs * split.parts;
  for (int64_t t = global_index(); t < total; t += grid_stride()) {
    const ColumnChunk c = column_chunk(t, outputs, g, split);
    const T* col = x + c.column;
    ValIdx<compute_t<T>> best{widen(col[c.lo * g.inner]), c.lo};
    for (int64_t k = c.lo + 1; k < c.hi && !is_nan_value(best.v); ++k) {
      const compute_t<T> v = widen(col[k * g.inner]);
      if (v > best.v || is_nan_value(v)) best = {v, k};
    }
    partial[t] = best;
  }
}

template <class T, class O>
__global__ void column_finish_max(const ValIdx<compute_t<T>>* partial, O* y, int64_t outputs,
                                  int64_t parts, bool arg) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t j = global_index(); j < outputs; j += grid_stride()) {
    ValIdx<compute_t<T>> best = partial[j];
    for (int64_t p = 1; p < parts; ++p) best = MaxFirst{}(best, partial[p * outputs + j]);
    y[j] = arg ? O(best.i) : O(best.v);
  }
}

// The rows' partial results (row-major: row r's parts at r * parts ...), combined per row in
// chunk order: sums added (then FinishSum), max/argmax by MaxFirst (then StoreMax).
template <class A, class O>
__global__ void row_finish_sum(const A* partial, O* y, int64_t rows, int64_t parts,
                               FinishSum<A, O> finish) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t r = global_index(); r < rows; r += grid_stride()) {
    A s = partial[r * parts];
    for (int64_t p = 1; p < parts; ++p) s += partial[r * parts + p];
    y[r] = finish(s);
  }
}

template <class T, class O>
__global__ void row_finish_max(const ValIdx<compute_t<T>>* partial, int64_t rows, int64_t parts,
                               StoreMax<T, O> store) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t r = global_index(); r < rows; r += grid_stride()) {
    ValIdx<compute_t<T>> best = partial[r * parts];
    for (int64_t p = 1; p < parts; ++p) best = MaxFirst{}(best, partial[r * parts + p]);
    store(r, best);
  }
}

// Outputs below which a strided sum splits its columns (with kColumnThreads threads in
// all, more outputs keep every thread busy one column each).
constexpr int64_t kFewColumns = 16384;

const char* kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::sum: return "sum";
    case ReduceKind::mean: return "mean";
    case ReduceKind::max: return "max";
    case ReduceKind::argmax: return "argmax";
    case ReduceKind::sum_squares: return "sum_squares";
  }
  return "reduce";
}

// ---- entry ----------------------------------------------------------------------------

template <class T, class O>
void reduce_sum(const KernelContext& ctx, const Reduce<T, O>& a) {
  const ReduceGeometry g = a.g;
  const bool mean = a.kind == ReduceKind::mean;
  const double scale = mean ? 1.0 / double(g.n) : 1.0;
  const T* x = a.x.get();
  O* y = a.y.get();
  cudaStream_t s = stream_of(ctx);
  const char* op = kind_name(a.kind);
  const int64_t outputs = g.outer * g.inner;
  if (a.kind == ReduceKind::sum_squares) {  // full reductions only (ops/reduce.cpp)
    using A = Acc<T>;
    thrust::transform_iterator<ToAccSquare<T>, const T*> in(x, ToAccSquare<T>{});
    thrust::transform_output_iterator<FinishSum<A, O>, O*> out(y, FinishSum<A, O>{false, 1.0});
    run_cub(ctx, op, "cub::DeviceReduce::Reduce", [&](void* tmp, size_t& bytes) {
      return cub::DeviceReduce::Reduce(tmp, bytes, in, out, g.n, Plus<A>{}, A(0), s);
    });
    return;
  }
  if (g.inner != 1 && outputs < kFewColumns) {
    const ChannelParts split = column_parts(g.n, outputs);
    if (split.parts > 1) {
      StorageRef keep;
      auto* partial = static_cast<Acc<T>*>(
          scratch(ctx, size_t(outputs * split.parts) * sizeof(Acc<T>), keep, op));
      column_partial_sums<T>
          <<<blocks_for(outputs * split.parts), kThreads, 0, s>>>(x, partial, g, split);
      column_finish<T, O>
          <<<blocks_for(outputs), kThreads, 0, s>>>(partial, y, outputs, split.parts, mean, scale);
      return;
    }
  }
  if (g.inner != 1 || g.n < kMinCubRow) {
    sum_kernel<T, O><<<blocks_for(outputs), kThreads, 0, s>>>(x, y, g, mean, scale);
    return;
  }
  using A = Acc<T>;
  thrust::transform_iterator<ToAcc<T>, const T*> in(x, ToAcc<T>{});
  thrust::transform_output_iterator<FinishSum<A, O>, O*> out(y, FinishSum<A, O>{mean, scale});
  if (g.outer == 1) {
    run_cub(ctx, op, "cub::DeviceReduce::Reduce", [&](void* tmp, size_t& bytes) {
      return cub::DeviceReduce::Reduce(tmp, bytes, in, out, g.n, Plus<A>{}, A(0), s);
    });
    return;
  }
  // 16-bit outputs go through double partials too: CUB takes a segmented reduce's initial
  // value in the output's value type, to which a double does not convert implicitly.
  if (const ChannelParts split = row_parts(g.n, g.outer); split.parts > 1 || is_half_v<O>) {
    // A few long rows: one segment per chunk into partial sums, then each row's in order.
    const int64_t segments = g.outer * split.parts;
    StorageRef keep;
    auto* partial = static_cast<A*>(scratch(ctx, size_t(segments) * sizeof(A), keep, op));
    const ChunkOffsets chunks = chunk_offsets(g.n, split);
    run_cub(ctx, op, "cub::DeviceSegmentedReduce::Reduce", [&](void* tmp, size_t& bytes) {
      return cub::DeviceSegmentedReduce::Reduce(tmp, bytes, in, partial, segments, chunks.begin,
                                                chunks.end, Plus<A>{}, A(0), s);
    });
    row_finish_sum<A, O><<<blocks_for(g.outer), kThreads, 0, s>>>(partial, y, g.outer, split.parts,
                                                                  FinishSum<A, O>{mean, scale});
    return;
  }
  if constexpr (!is_half_v<O>) {  // (16-bit outputs returned above)
    thrust::transform_iterator<RowStart, thrust::counting_iterator<int64_t>> begin(
        thrust::counting_iterator<int64_t>(0), RowStart{g.n});
    run_cub(ctx, op, "cub::DeviceSegmentedReduce::Reduce", [&](void* tmp, size_t& bytes) {
      return cub::DeviceSegmentedReduce::Reduce(tmp, bytes, in, out, g.outer, begin, begin + 1,
                                                Plus<A>{}, A(0), s);
    });
  }
}

template <class T, class O>
void reduce_max(const KernelContext& ctx, const Reduce<T, O>& a) {
  using R = compute_t<T>;  // what values compare as (float for 16-bit tensors)
  const ReduceGeometry g = a.g;
  const bool arg = a.kind == ReduceKind::argmax;
  const T* x = a.x.get();
  O* y = a.y.get();
  cudaStream_t s = stream_of(ctx);
  const char* op = kind_name(a.kind);
  const int64_t outputs = g.outer * g.inner;
  if (g.inner != 1 && outputs < kFewColumns) {
    const ChannelParts split = column_parts(g.n, outputs);
    if (split.parts > 1) {
      StorageRef keep;
      auto* partial = static_cast<ValIdx<R>*>(
          scratch(ctx, size_t(outputs * split.parts) * sizeof(ValIdx<R>), keep, op));
      column_partial_max<T>
          <<<blocks_for(outputs * split.parts), kThreads, 0, s>>>(x, partial, g, split);
      column_finish_max<T, O>
          <<<blocks_for(outputs), kThreads, 0, s>>>(partial, y, outputs, split.parts, arg);
      return;
    }
  }
  if (g.inner != 1 || g.n < kMinCubRow) {
    max_kernel<T, O><<<blocks_for(outputs), kThreads, 0, s>>>(x, y, g, arg);
    return;
  }
  thrust::transform_iterator<MakeValIdx<T>, thrust::counting_iterator<int64_t>> in(
      thrust::counting_iterator<int64_t>(0), MakeValIdx<T>{x});
  auto out = thrust::make_tabulate_output_iterator(StoreMax<T, O>{y, g.n, arg});
  const ValIdx<R> init = max_identity<R>();
  if (g.outer == 1) {
    run_cub(ctx, op, "cub::DeviceReduce::Reduce", [&](void* tmp, size_t& bytes) {
      return cub::DeviceReduce::Reduce(tmp, bytes, in, out, g.n, MaxFirst{}, init, s);
    });
    return;
  }
  if (const ChannelParts split = row_parts(g.n, g.outer); split.parts > 1) {
    // A few long rows: each chunk's pair (flat index) into partials, then each row's.
    const int64_t segments = g.outer * split.parts;
    StorageRef keep;
    auto* partial =
        static_cast<ValIdx<R>*>(scratch(ctx, size_t(segments) * sizeof(ValIdx<R>), keep, op));
    const ChunkOffsets chunks = chunk_offsets(g.n, split);
    run_cub(ctx, op, "cub::DeviceSegmentedReduce::Reduce", [&](void* tmp, size_t& bytes) {
      return cub::DeviceSegmentedReduce::Reduce(tmp, bytes, in, partial, segments, chunks.begin,
                                                chunks.end, MaxFirst{}, init, s);
    });
    row_finish_max<T, O><<<blocks_for(g.outer), kThreads, 0, s>>>(partial, g.outer, split.parts,
                                                                  StoreMax<T, O>{y, g.n, arg});
    return;
  }
  thrust::transform_iterator<RowStart, thrust::counting_iterator<int64_t>> begin(
      thrust::counting_iterator<int64_t>(0), RowStart{g.n});
  run_cub(ctx, op, "cub::DeviceSegmentedReduce::Reduce", [&](void* tmp, size_t& bytes) {
    return cub::DeviceSegmentedReduce::Reduce(tmp, bytes, in, out, g.outer, begin, begin + 1,
                                              MaxFirst{}, init, s);
  });
}

// The front-end pairs kinds and dtypes as follows (ops/reduce.cpp); only those paths are
// compiled for each instantiation.
template <class T, class O>
void reduce(const KernelContext& ctx, const Reduce<T, O>& a, const NoExtra&) {
  constexpr bool kFloating = std::is_floating_point_v<T> || is_half_v<T>;
  constexpr bool kSums = std::is_same_v<O, std::conditional_t<kFloating, T, int64_t>>;
  constexpr bool kMax = std::is_same_v<O, T>;
  constexpr bool kArgmax = std::is_same_v<O, int64_t>;
  const ReduceKind k = a.kind;
  if (k == ReduceKind::sum || k == ReduceKind::mean || k == ReduceKind::sum_squares) {
    if constexpr (kSums) {
      if (k == ReduceKind::sum || kFloating) return reduce_sum(ctx, a);
    }
  } else if (k == ReduceKind::max) {
    if constexpr (kMax) return reduce_max(ctx, a);
  } else if (k == ReduceKind::argmax) {
    if constexpr (kArgmax) return reduce_max(ctx, a);
  }
  throw std::runtime_error(std::string("[") + kind_name(k) +
                           "] no CUDA kernel for this input/output dtype pair");
}

}  // namespace

// ---- registration ---------------------------------------------------------------------

void register_reduce(OpList& ops) {
  CudaKernel<Reduce<float, float>, NoExtra>::fn = &reduce<float, float>;
  CudaKernel<Reduce<double, double>, NoExtra>::fn = &reduce<double, double>;
  CudaKernel<Reduce<bfloat16, bfloat16>, NoExtra>::fn = &reduce<bfloat16, bfloat16>;
  CudaKernel<Reduce<float16, float16>, NoExtra>::fn = &reduce<float16, float16>;
  CudaKernel<Reduce<bfloat16, int64_t>, NoExtra>::fn = &reduce<bfloat16, int64_t>;
  CudaKernel<Reduce<float16, int64_t>, NoExtra>::fn = &reduce<float16, int64_t>;
  CudaKernel<Reduce<int32_t, int32_t>, NoExtra>::fn = &reduce<int32_t, int32_t>;
  CudaKernel<Reduce<int64_t, int64_t>, NoExtra>::fn = &reduce<int64_t, int64_t>;
  CudaKernel<Reduce<float, int64_t>, NoExtra>::fn = &reduce<float, int64_t>;
  CudaKernel<Reduce<double, int64_t>, NoExtra>::fn = &reduce<double, int64_t>;
  CudaKernel<Reduce<int32_t, int64_t>, NoExtra>::fn = &reduce<int32_t, int64_t>;
  for (OpId id : {OpId::sum, OpId::mean, OpId::max, OpId::argmax, OpId::sum_squares})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
