// Recording fakes of GPUs for CPU tests (core/cuda/fake_device.h): fake_gpu(i) installs a
// FakeDevice as cuda:i once per process and returns it. Suites use indices 8 and up, so a
// machine's real GPUs (cuda:0, ...) stay real. A fake whose test kills it (a sticky error)
// gets an index of its own.
#pragma once

#include <memory>
#include <mutex>

#include "core/cuda/fake_device.h"
#include "core/cuda/runtime.h"

namespace tide::test_util {

inline cuda::FakeDevice& fake_gpu(int index = 8, size_t capacity = size_t(1) << 32) {
  static std::mutex mu;
  static std::shared_ptr<cuda::FakeDevice> fakes[16];
  std::lock_guard lock(mu);
  if (!fakes[index]) {
    fakes[index] = std::make_shared<cuda::FakeDevice>(capacity, "fake GPU");
    cuda::install_device(index, fakes[index]);
  }
  return *fakes[index];
}

}  // namespace tide::test_util
