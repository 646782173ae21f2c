// CUDA launchers of the gather entries (ops/gather_kernels.h).
//   take_rows: thrust::transform over the output elements (Thrust's gather with a row map;
//     no temporary storage, so it is captured into CUDA graphs as is).
//   scatter_add_rows: the positions (thrust::sequence) sorted by row with CUB's stable radix
//     sort, then one thread per (row, column) sums its row's positions in increasing order:
//     the CPU's order, so the CPU's bits, and no atomics.
// take_rows moves bfloat16 and float16 rows too (scatter_add_rows: float32 and wider).
// A kernel cannot throw: an index outside [0, n) gives a NaN (or lowest-value) output row
// in take_rows and is skipped by scatter_add_rows (the CPU entries fail the op instead).
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/transform.h>

#include <cub/device/device_radix_sort.cuh>
#include <cuda/std/limits>

#include "core/cuda/await_grids.h"
#include "core/float16.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/cuda/scratch.h"
#include "ops/functors.h"
#include "ops/gather_kernels.h"

namespace tide::kernels::cuda {

namespace {

template <class T>
__device__ T invalid_row_value() {
  if constexpr (is_half_v<T>) return T(::cuda::std::numeric_limits<float>::quiet_NaN());
  else if constexpr (std::is_floating_point_v<T>)
    return ::cuda::std::numeric_limits<T>::quiet_NaN();
  else return ::cuda::std::numeric_limits<T>::lowest();
}

template <class T, class I>
struct RowElement {
  const T* src;
  const I* rows;
  int64_t n, width;
  __device__ T operator()(int64_t e) const {
    const int64_t r = int64_t(rows[e / width]);
    if (r < 0 || r >= n) return invalid_row_value<T>();
    return src[r * width + e % width];
  }
};

template <class T, class I>
void take_rows(const KernelContext& ctx, const TakeRows<T, I>& a, const NoExtra&) {
  const int64_t total = a.k * a.width;
  if (total == 0) return;
  thrust::transform(thrust::cuda::par_nosync.on(stream_of(ctx)),
                    thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(total), a.y.get(),
                    RowElement<T, I>{a.src.get(), a.rows.get(), a.n, a.width});
}

// A row index as a sort key: out-of-range indices become n, sorted last and skipped.
template <class I>
struct RowKey {
  const I* rows;
  int64_t n;
  __device__ int64_t operator()(int64_t i) const {
    const int64_t r = int64_t(rows[i]);
    return r < 0 || r >= n ? n : r;
  }
};

// One thread per (sorted position j, column c) where j starts a row's run: y[row, c] = the
// run's rows of g summed in increasing position order, from zero (as the CPU adds them).
template <class T>
__global__ void sum_runs(const int64_t* keys, const int64_t* pos, const T* g, T* y, int64_t k,
                         int64_t n, int64_t width) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t e = global_index(); e < k * width; e += grid_stride()) {
    const int64_t j = e / width, c = e % width, row = keys[j];
    if (row >= n || (j > 0 && keys[j - 1] == row)) continue;
    T acc = T(0);
    for (int64_t q = j; q < k && keys[q] == row; ++q) acc = fn::Add{}(acc, g[pos[q] * width + c]);
    y[row * width + c] = acc;
  }
}

template <class T, class I>
void scatter_add_rows(const KernelContext& ctx, const ScatterAddRows<T, I>& a, const NoExtra&) {
  cudaStream_t s = stream_of(ctx);
  check(cudaMemsetAsync(a.y.get(), 0, size_t(a.n * a.width) * sizeof(T), s), "cudaMemsetAsync");
  if (a.k == 0 || a.width == 0) return;
  const size_t k = size_t(a.k);
  // Scratch: keys and positions, in and out, then CUB's temporary storage.
  size_t sort_bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (int64_t*)nullptr, (int64_t*)nullptr,
                                        (int64_t*)nullptr, (int64_t*)nullptr, a.k, 0, 64, s),
        "cub::DeviceRadixSort::SortPairs");
  // CUB's storage after the four arrays, on a 256-byte boundary as CUB prefers.
  const size_t arrays = (4 * k * sizeof(int64_t) + 255) / 256 * 256;
  StorageRef keep;
  auto* raw =
      static_cast<unsigned char*>(scratch(ctx, arrays + sort_bytes, keep, "scatter_add_rows"));
  auto* base = reinterpret_cast<int64_t*>(raw);
  int64_t *keys_in = base, *keys = base + k, *pos_in = base + 2 * k, *pos = base + 3 * k;
  auto policy = thrust::cuda::par_nosync.on(s);
  thrust::transform(policy, thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(a.k), keys_in, RowKey<I>{a.rows.get(), a.n});
  thrust::sequence(policy, pos_in, pos_in + a.k);
  // Keys lie in [0, n]: sort only the bits that can be set.
  int end_bit = 1;
  while (end_bit < 63 && (int64_t(1) << end_bit) <= a.n) ++end_bit;
  check(cub::DeviceRadixSort::SortPairs(raw + arrays, sort_bytes, keys_in, keys, pos_in, pos, a.k,
                                        0, end_bit, s),
        "cub::DeviceRadixSort::SortPairs");
  sum_runs<T><<<blocks_for(a.k * a.width), kThreads, 0, s>>>(keys, pos, a.g.get(), a.y.get(), a.k,
                                                             a.n, a.width);
}

template <class T>
void register_for() {
  CudaKernel<TakeRows<T, int32_t>, NoExtra>::fn = &take_rows<T, int32_t>;
  CudaKernel<TakeRows<T, int64_t>, NoExtra>::fn = &take_rows<T, int64_t>;
  CudaKernel<ScatterAddRows<T, int32_t>, NoExtra>::fn = &scatter_add_rows<T, int32_t>;
  CudaKernel<ScatterAddRows<T, int64_t>, NoExtra>::fn = &scatter_add_rows<T, int64_t>;
}

template <class T>
void for_16_bit_rows() {
  CudaKernel<TakeRows<T, int32_t>, NoExtra>::fn = &take_rows<T, int32_t>;
  CudaKernel<TakeRows<T, int64_t>, NoExtra>::fn = &take_rows<T, int64_t>;
}

}  // namespace

void register_gather(OpList& ops) {
  register_for<float>();
  register_for<double>();
  register_for<int32_t>();
  register_for<int64_t>();
  // 16-bit rows are moved as they are; their gradient's scatter-add runs in float32
  // (ops/gather.cpp).
  for_16_bit_rows<bfloat16>();
  for_16_bit_rows<float16>();
  ops[size_t(OpId::take_rows)] = true;
  ops[size_t(OpId::scatter_add_rows)] = true;
}

}  // namespace tide::kernels::cuda
