// CUDA launchers of the creation entries (ops/creation_kernels.h): constant and range
// fills, Philox random fills and same-device byte copies. Each computes the CPU's formula
// (ops/cpu/creation.cpp) element by element. Not here: traced random counters (the CPU
// reads them from host memory when the kernel runs; the GPU path refuses them).
#include <stdexcept>
#include <string>

#include "core/cuda/await_grids.h"
#include "core/philox.h"
#include "ops/creation_kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/functors.h"

namespace tide::kernels::cuda {

namespace {

// ---- kernels --------------------------------------------------------------------------

template <class T>
__global__ void fill_kernel(T* out, int64_t n, double value) {
  tide::cuda::await_prerequisite_grids();
  const T v = fn::convert<T>(value);
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] = v;
}

// value + i * step rounded after the product and after the sum, as the CPU does: the
// explicit _rn intrinsics keep nvcc from contracting it into an FMA (one rounding).
template <class T>
__global__ void range_kernel(T* out, int64_t n, double value, double step) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < n; i += grid_stride())
    out[i] = fn::convert<T>(__dadd_rn(value, __dmul_rn(double(i), step)));
}

// One Philox block per four consecutive elements, as the CPU loop. `counter`, when set, is
// the {offset, key} pair in device memory a traced replay wrote before the graph ran.
template <class T>
__global__ void random_kernel(T* out, int64_t n, const uint64_t* counter, uint64_t offset,
                              uint64_t key, bool normal) {
  tide::cuda::await_prerequisite_grids();
  if (counter) {
    offset = counter[0];
    key = counter[1];
  }
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = global_index(); b < blocks; b += grid_stride()) {
    T v[4];
    if (normal) philox::normal4(offset, key, uint64_t(b), v);
    else philox::uniform4(offset, key, uint64_t(b), v);
    for (int64_t l = 0, i = 4 * b; l < 4 && i < n; ++l, ++i) out[i] = v[l];
  }
}

// ---- entries --------------------------------------------------------------------------

template <class T>
void fill(const KernelContext& ctx, const Fill<T>& a, const NoExtra&) {
  if (a.n == 0) return;
  T* out = a.out.get();
  if (a.range)
    range_kernel<T><<<blocks_for(a.n), kThreads, 0, stream_of(ctx)>>>(out, a.n, a.value, a.step);
  else fill_kernel<T><<<blocks_for(a.n), kThreads, 0, stream_of(ctx)>>>(out, a.n, a.value);
}

template <class T>
void random_fill(const KernelContext& ctx, const RandomFill<T>& a, const NoExtra&) {
  if (a.n == 0) return;
  random_kernel<T><<<blocks_for((a.n + 3) / 4), kThreads, 0, stream_of(ctx)>>>(
      a.out.get(), a.n, a.counter, a.offset, a.key, a.normal);
}

void copy_bytes(const KernelContext& ctx, const CopyBytes& a, const NoExtra&) {
  if (a.bytes == 0) return;
  cudaError_t e =
      cudaMemcpyAsync(a.dst.get(), a.src.get(), a.bytes, cudaMemcpyDeviceToDevice, stream_of(ctx));
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cudaMemcpyAsync (device to device): ") +
                             cudaGetErrorString(e));
}

}  // namespace

// ---- registration ---------------------------------------------------------------------

void register_creation(OpList& ops) {
  CudaKernel<Fill<float>, NoExtra>::fn = &fill<float>;
  CudaKernel<Fill<double>, NoExtra>::fn = &fill<double>;
  CudaKernel<Fill<int32_t>, NoExtra>::fn = &fill<int32_t>;
  CudaKernel<Fill<int64_t>, NoExtra>::fn = &fill<int64_t>;
  CudaKernel<Fill<bfloat16>, NoExtra>::fn = &fill<bfloat16>;
  CudaKernel<Fill<float16>, NoExtra>::fn = &fill<float16>;
  CudaKernel<RandomFill<float>, NoExtra>::fn = &random_fill<float>;
  CudaKernel<RandomFill<double>, NoExtra>::fn = &random_fill<double>;
  CudaKernel<CopyBytes, NoExtra>::fn = &copy_bytes;
  for (OpId id :
       {OpId::zeros, OpId::ones, OpId::full, OpId::arange, OpId::randn, OpId::rand, OpId::clone})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
