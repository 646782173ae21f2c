// tide_ops_tests runs every op case on the CPU and on a recording fake of a GPU (cuda:8),
// whose kernels are the CPU ones run as host functions in stream order: the CUDA path's
// copies, streams, hazards and staging are exercised on every machine. The real GPU runs
// the same cases in tide_cuda_tests.
#include "fake_gpu.h"
#include "tests/ops/op_harness.h"
#include "tests/ops/runs_cpu_kernels.h"

namespace tide::test {

std::vector<Device> case_devices() {
  test_util::fake_gpu(8);
  return {Device::cuda(8)};
}

bool runs_cpu_kernels(Device d) { return d.is_cpu() || d == Device::cuda(8); }

}  // namespace tide::test
