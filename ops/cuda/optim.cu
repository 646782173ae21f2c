// CUDA launchers of the optimizer entries (ops/optim_kernels.h): the fused in-place SGD and
// Adam updates over fn::SgdUpdate / fn::AdamUpdate (ops/functors.h, the math the CPU loops
// run), the step counter's increment and the learning-rate schedule (fn::WarmupCosine). lr,
// the grad scale and the step count are read from device memory by the kernel when it runs,
// never at launch (docs/contributing.md, Values that change between replays): a CUDA graph
// replays the same launch with new values. Nothing here synchronizes.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/cuda/await_grids.h"
#include "core/engine/failure.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/optim_kernels.h"

namespace tide::kernels::cuda {

namespace {

// adam_update_ lists m and v as writes only (reads + writes must fit the task record's
// eight storages), so the engine does not skip the kernel when they carry an earlier
// failure: the entry refuses them on the host before launching, as the CPU kernel does.
void check_not_failed(const Storage* s, const char* what) {
  if (const Failure* f = s->failure())
    throw std::runtime_error(std::string(what) +
                             " holds the failure of an earlier op: " + f->what());
}

// ---- kernels --------------------------------------------------------------------------

// buf == nullptr: no momentum buffer; scale == nullptr: unscaled. Every thread derives the
// (cheap) factors from lr and the scale.
template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, const T* lr, const T* scale, int64_t n,
                           fn::SgdUpdate f) {
  tide::cuda::await_prerequisite_grids();
  const fn::SgdUpdate::Factors<T> k = f.factors(*lr, scale);
  if (k.skip) return;  // a non-finite grad scale: nothing changes
  if (buf) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) f(p[i], g[i], buf[i], k);
  } else {
    for (int64_t i = global_index(); i < n; i += grid_stride()) {
      T unused{};
      f(p[i], g[i], unused, k);
    }
  }
}

// Thread 0 of each block computes the factors (two pow in double) into shared memory.
// The CPU refuses a step count < 1; a kernel cannot fail its op, so here t is clamped to
// 1 (the bias corrections of a first step) instead of dividing by 1 - beta1^0 = 0.
template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, const T* lr, const int64_t* step,
                            const T* scale, int64_t n, fn::AdamUpdate f) {
  tide::cuda::await_prerequisite_grids();
  __shared__ fn::AdamUpdate::Factors<T> shared_k;
  if (threadIdx.x == 0) {
    const int64_t t = *step;
    shared_k = f.factors(*lr, static_cast<long long>(t < 1 ? 1 : t), scale);
  }
  __syncthreads();
  const fn::AdamUpdate::Factors<T> k = shared_k;
  if (k.skip) return;  // a non-finite grad scale: nothing changes
  for (int64_t i = global_index(); i < n; i += grid_stride()) f(p[i], g[i], m[i], v[i], k);
}

template <class T>
__global__ void increment_kernel(T* c) {
  tide::cuda::await_prerequisite_grids();
  *c += 1;
}

template <class T>
__global__ void warmup_cosine_kernel(T* lr, const int64_t* step, fn::WarmupCosine f) {
  tide::cuda::await_prerequisite_grids();
  *lr = T(f(static_cast<long long>(*step)));
}

// ---- entries --------------------------------------------------------------------------

template <class T>
void sgd(const KernelContext& ctx, const Sgd<T>& a, const fn::SgdUpdate& f) {
  if (a.n == 0) return;
  T* buf = a.buf.s ? a.buf.get() : nullptr;
  const T* scale = a.scale.s ? a.scale.get() : nullptr;
  sgd_kernel<T><<<blocks_for(a.n), kThreads, 0, stream_of(ctx)>>>(a.p.get(), a.g.get(), buf,
                                                                  a.lr.get(), scale, a.n, f);
}

template <class T>
void adam(const KernelContext& ctx, const Adam<T>& a, const fn::AdamUpdate& f) {
  check_not_failed(a.m.s, "m");
  check_not_failed(a.v.s, "v");
  if (a.n == 0) return;
  const T* scale = a.scale.s ? a.scale.get() : nullptr;
  adam_kernel<T><<<blocks_for(a.n), kThreads, 0, stream_of(ctx)>>>(
      a.p.get(), a.g.get(), a.m.get(), a.v.get(), a.lr.get(), a.step.get(), scale, a.n, f);
}

template <class T>
void increment(const KernelContext& ctx, const Increment<T>& a, const NoExtra&) {
  increment_kernel<T><<<1, 1, 0, stream_of(ctx)>>>(a.c.get());
}

template <class T>
void warmup_cosine(const KernelContext& ctx, const LrSchedule<T>& a, const fn::WarmupCosine& f) {
  warmup_cosine_kernel<T><<<1, 1, 0, stream_of(ctx)>>>(a.lr.get(), a.step.get(), f);
}

}  // namespace

void register_optim(OpList& ops) {
  CudaKernel<Sgd<float>, fn::SgdUpdate>::fn = &sgd<float>;
  CudaKernel<Sgd<double>, fn::SgdUpdate>::fn = &sgd<double>;
  CudaKernel<Adam<float>, fn::AdamUpdate>::fn = &adam<float>;
  CudaKernel<Adam<double>, fn::AdamUpdate>::fn = &adam<double>;
  CudaKernel<Increment<int32_t>, NoExtra>::fn = &increment<int32_t>;
  CudaKernel<Increment<int64_t>, NoExtra>::fn = &increment<int64_t>;
  CudaKernel<LrSchedule<float>, fn::WarmupCosine>::fn = &warmup_cosine<float>;
  CudaKernel<LrSchedule<double>, fn::WarmupCosine>::fn = &warmup_cosine<double>;
  for (OpId id : {OpId::sgd_update_, OpId::adam_update_, OpId::increment_, OpId::warmup_cosine_lr_})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
