// tide_cuda_tests runs every op case of tests/ops on the CPU and on the real cuda:0 (the
// binary only runs where one exists: tests/cuda/main.cpp).
#include "tests/ops/op_harness.h"

namespace tide::test {

std::vector<Device> case_devices() { return {Device::cuda(0)}; }

}  // namespace tide::test
