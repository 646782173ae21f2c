// Helpers shared by the GPU trace executor's tests (test_device_graph*.cpp): a fake GPU, tensors
// made on it, and a small training rig there.
#pragma once

#include <utility>
#include <vector>

#include "core/cuda/runtime.h"
#include "fake_gpu.h"
#include "ops/ops.h"
#include "tests/train_rig.h"

namespace tide::device_graph_test {

using cuda::FakeDevice;

constexpr int kGpu = 8;
inline Device gpu() {
  test_util::fake_gpu(kGpu);
  return Device::cuda(kGpu);
}
inline FakeDevice& fake() { return test_util::fake_gpu(kGpu); }

inline Tensor on_gpu(std::vector<float> v, std::vector<int64_t> shape) {
  return from_vector(v, Shape(std::move(shape)), gpu());
}

inline std::vector<float> values(int n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = scale * float((i * 7) % 11 - 5);
  return v;
}

// A loop body: one elementwise chain on the state.
inline Tensor step(const Tensor& s) { return s * 1.5 - 0.25; }

// Two branches (matmul, and an elementwise chain) joined at the end.
inline std::vector<Tensor> branches(const Tensor& x, const Tensor& w) {
  Tensor h = relu(matmul(x, w) + 1.0);
  Tensor e = x * 0.5 - 2.0;
  return {h * 2.0, sum(e, 1) + sum(h, 1)};
}

inline test_util::TrainRig make_rig(bool adam) {
  return test_util::make_rig({.sizes = {12, 32, 1},
                              .device = gpu(),
                              .adam = adam,
                              .lr = adam ? 0.01 : 0.05,
                              .momentum = 0.9});
}

}  // namespace tide::device_graph_test
