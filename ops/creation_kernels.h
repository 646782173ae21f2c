// The creation family's kernel entries (ops/kernel_entry.h): fills, ranges, Philox random
// fills and same-device copies. CPU implementations in ops/cpu/creation.cpp, CUDA's in
// ops/cuda/creation.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// out[i] = T(value) (range: T(value + i * step)).
template <class T>
struct Fill {
  DataRef<T> out;
  int64_t n = 0;
  double value = 0, step = 0;
  bool range = false;
};
// out[i] = element i of the Philox stream (offset, key): standard normal or uniform [0, 1).
// `counter`, when set, points at {offset, key} to read when the kernel runs (a traced
// replay refreshes it; on a GPU it is device memory); else the fixed pair is used.
template <class T>
struct RandomFill {
  DataRef<T> out;
  int64_t n = 0;
  const uint64_t* counter = nullptr;
  uint64_t offset = 0, key = 0;
  bool normal = true;
};
// dst[0, bytes) = src[0, bytes), both on the kernel's device.
struct CopyBytes {
  DataRef<unsigned char> src, dst;
  size_t bytes = 0;
};

namespace cpu {
template <class T>
void fill(const KernelContext&, const Fill<T>&, const NoExtra&);
template <class T>
void random_fill(const KernelContext&, const RandomFill<T>&, const NoExtra&);
void copy_bytes(const KernelContext&, const CopyBytes&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
