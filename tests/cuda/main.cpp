// The CUDA suites' main: exits 77 (ctest's SKIP_RETURN_CODE: "Skipped", not "Passed") when
// this machine has no CUDA device, so a CPU-only run says plainly what did not run.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/cuda/runtime.h"

int main(int argc, char** argv) {
  if (tide::cuda::device_count() == 0) {
    std::printf("no CUDA device on this machine: the CUDA tests are skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
