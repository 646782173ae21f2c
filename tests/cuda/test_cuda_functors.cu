// The elementwise functors and Philox run on the GPU and agree with the CPU path that the
// other suites test. Compiled whenever nvcc is present; skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/philox.h"
#include "ops/functors.h"

namespace {

#define CUDA_OK(call)                                                      \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <class F, class T>
__global__ void unary_kernel(const T* a, T* o, int n, F f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = f(a[i]);
}

template <class T>
__global__ void normal_kernel(T* o, int n, unsigned long long offset, unsigned long long key) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = tide::philox::normal_at<T>(offset, key, uint64_t(i));
}

template <class F>
void check_unary(F f, std::vector<float> in) {
  int n = int(in.size());
  float *da = nullptr, *dout = nullptr;
  CUDA_OK(cudaMalloc(&da, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&dout, n * sizeof(float)));
  CUDA_OK(cudaMemcpy(da, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  unary_kernel<<<(n + 127) / 128, 128>>>(da, dout, n, f);
  CUDA_OK(cudaGetLastError());
  std::vector<float> out(n);
  CUDA_OK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(da);
  cudaFree(dout);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(out[i], f(in[i]), 1e-6f * (1 + std::fabs(out[i])));
}

TEST(CudaFunctors, MatchCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> in;
  for (int i = 0; i < 1000; ++i) in.push_back(-5.0f + 0.01f * float(i) + 0.001f);
  check_unary(tide::fn::Sigmoid{}, in);
  check_unary(tide::fn::Tanh{}, in);
  check_unary(tide::fn::Relu{}, in);
  check_unary(tide::fn::Pow{3.0}, in);
  check_unary(tide::fn::GeluErf{}, in);
  check_unary(tide::fn::GeluTanh{}, in);
}

TEST(CudaPhilox, SameNumbersAsCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const int n = 4096;
  float* d = nullptr;
  CUDA_OK(cudaMalloc(&d, n * sizeof(float)));
  normal_kernel<<<(n + 255) / 256, 256>>>(d, n, 17ull, 0x1234ull);
  CUDA_OK(cudaGetLastError());
  std::vector<float> out(n);
  CUDA_OK(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(d);
  // Bitwise: the transform uses no libm and this file is compiled with --fmad=false.
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(out[i], tide::philox::normal_at<float>(17, 0x1234, uint64_t(i))) << i;
}

}  // namespace
