// tide_cuda_tests runs every op case of tests/ops on the CPU and on the real cuda:0 (the
// binary only runs where one exists: tests/cuda/main.cpp).
#include "tests/ops/op_harness.h"
#include "tests/ops/runs_cpu_kernels.h"

namespace tide::test {

std::vector<Device> case_devices() { return {Device::cuda(0)}; }

bool runs_cpu_kernels(Device d) { return d.is_cpu(); }

}  // namespace tide::test
