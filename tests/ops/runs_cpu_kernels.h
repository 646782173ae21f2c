// Whether a case device runs the CPU's kernels (the CPU, or tide_ops_tests' recording fake),
// so that its results equal the CPU's bit for bit; a real GPU's kernels need not. Defined
// beside case_devices() (tests/ops/case_devices.cpp, tests/cuda/case_devices.cpp).
#pragma once

#include "core/device.h"

namespace tide::test {

bool runs_cpu_kernels(Device d);

}  // namespace tide::test
