// The optimizer family's kernel entries (ops/kernel_entry.h): the fused in-place SGD and
// Adam updates over fn::SgdUpdate / fn::AdamUpdate (ops/functors.h), and the step counter.
// Each kernel reads lr (and Adam's step count) from memory when it runs (docs/contributing.md,
// Values that change between replays). CPU implementations in ops/cpu/optim.cpp, CUDA's in
// ops/cuda/optim.cu.
#pragma once

#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/functors.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// p, buf updated in place from g; lr one element of T; buf.s == nullptr without momentum.
template <class T>
struct Sgd {
  DataRef<T> p, g, buf, lr;
  int64_t n = 0;
};
// p, m, v updated in place from g; lr one element of T, step one int64 (>= 1).
template <class T>
struct Adam {
  DataRef<T> p, g, m, v, lr;
  DataRef<int64_t> step;
  int64_t n = 0;
};
// *c += 1.
template <class T>
struct Increment {
  DataRef<T> c;
};

namespace cpu {
template <class T>
void sgd(const KernelContext&, const Sgd<T>&, const fn::SgdUpdate&);
template <class T>
void adam(const KernelContext&, const Adam<T>&, const fn::AdamUpdate&);
template <class T>
void increment(const KernelContext&, const Increment<T>&, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
