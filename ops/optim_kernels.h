// The optimizer family's kernel entries (ops/kernel_entry.h): the fused in-place SGD and
// Adam updates over fn::SgdUpdate / fn::AdamUpdate (ops/functors.h), the step counter and
// the learning-rate schedule over fn::WarmupCosine. Each kernel reads lr, the grad scale and
// the step count from memory when it runs (docs/contributing.md, Values that change between
// replays). CPU implementations in ops/cpu/optim.cpp, CUDA's in ops/cuda/optim.cu.
#pragma once

#include <cstdint>

#include "core/kernel_context.h"
#include "core/storage.h"
#include "ops/functors.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

// p, buf updated in place from g; lr one element of T; buf.s == nullptr without momentum;
// scale (one element of T, g's factor) s == nullptr when unscaled.
template <class T>
struct Sgd {
  DataRef<T> p, g, buf, lr, scale;
  int64_t n = 0;
};
// p, m, v updated in place from g; lr one element of T, step one int64 (>= 1); scale as
// Sgd's.
template <class T>
struct Adam {
  DataRef<T> p, g, m, v, lr, scale;
  DataRef<int64_t> step;
  int64_t n = 0;
};
// *lr = T(schedule(*step)).
template <class T>
struct LrSchedule {
  DataRef<T> lr;
  DataRef<int64_t> step;
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
template <class T>
void warmup_cosine(const KernelContext&, const LrSchedule<T>&, const fn::WarmupCosine&);
}  // namespace cpu

}  // namespace tide::kernels
