// CPU implementations of the optimizer entries (ops/optim_kernels.h): the functor's update
// over the elements, split over the intra-op thread pool above kParallelGrain like the
// elementwise loops; the step counter and the learning-rate schedule, one element each.
#include <stdexcept>
#include <string>

#include "core/engine/failure.h"
#include "core/thread_pool.h"
#include "ops/op_util.h"
#include "ops/optim_kernels.h"

namespace tide::kernels::cpu {

using tide::detail::kParallelGrain;

namespace {
// adam_update_ lists m and v as writes only (reads + writes must fit the task record's
// eight storages), so the engine does not skip the kernel when they carry an earlier
// failure: the kernel refuses them itself and the failure reaches p, m and v.
void check_not_failed(const Storage* s, const char* what) {
  if (const Failure* f = s->failure())
    throw std::runtime_error(std::string(what) +
                             " holds the failure of an earlier op: " + f->what());
}
}  // namespace

template <class T>
void sgd(const KernelContext&, const Sgd<T>& a, const fn::SgdUpdate& f) {
  // lr is read when the kernel runs, not at enqueue.
  const fn::SgdUpdate::Factors<T> k = f.factors(*a.lr.get(), a.scale.s ? a.scale.get() : nullptr);
  if (k.skip) return;  // a non-finite grad scale: nothing changes
  T* pp = a.p.get();
  const T* gg = a.g.get();
  T* bb = a.buf.s ? a.buf.get() : nullptr;
  const fn::SgdUpdate fl = f;
  parallel_for(a.n, kParallelGrain, [pp, gg, bb, k, fl](int64_t lo, int64_t hi) {
    // Locals, restrict-qualified: the loop vectorises (the operands never overlap).
    const fn::SgdUpdate::Factors<T> kk = k;
    T* __restrict pr = pp;
    const T* __restrict gr = gg;
    if (bb) {
      T* __restrict br = bb;
      for (int64_t i = lo; i < hi; ++i) fl(pr[i], gr[i], br[i], kk);
    } else {
      for (int64_t i = lo; i < hi; ++i) {
        T unused{};
        fl(pr[i], gr[i], unused, kk);
      }
    }
  });
}

template <class T>
void adam(const KernelContext&, const Adam<T>& a, const fn::AdamUpdate& f) {
  check_not_failed(a.m.s, "m");
  check_not_failed(a.v.s, "v");
  const T* scale = a.scale.s ? a.scale.get() : nullptr;
  // A non-finite grad scale: nothing changes, and a skipped first step leaves t at 0.
  if (fn::skips_update(scale)) return;
  const int64_t t = *a.step.get();  // read when the kernel runs, not at enqueue
  // Kernel errors are plain exceptions: the engine prefixes "[adam_update_]" and the site.
  if (t < 1)
    throw std::runtime_error("step count " + std::to_string(t) +
                             " < 1 (expected the number of this update; queue "
                             "increment_(step) first)");
  const fn::AdamUpdate::Factors<T> k = f.factors(*a.lr.get(), t, scale);
  T* pp = a.p.get();
  const T* gg = a.g.get();
  T* mm = a.m.get();
  T* vv = a.v.get();
  const fn::AdamUpdate fl = f;
  parallel_for(a.n, kParallelGrain, [pp, gg, mm, vv, k, fl](int64_t lo, int64_t hi) {
    // Locals, restrict-qualified: the loop vectorises (the operands never overlap).
    const fn::AdamUpdate::Factors<T> kk = k;
    T* __restrict pr = pp;
    const T* __restrict gr = gg;
    T* __restrict mr = mm;
    T* __restrict vr = vv;
    for (int64_t i = lo; i < hi; ++i) fl(pr[i], gr[i], mr[i], vr[i], kk);
  });
}

template <class T>
void increment(const KernelContext&, const Increment<T>& a, const NoExtra&) {
  *a.c.get() += 1;
}

template <class T>
void warmup_cosine(const KernelContext&, const LrSchedule<T>& a, const fn::WarmupCosine& f) {
  *a.lr.get() = T(f(*a.step.get()));  // the step is read when the kernel runs
}

template void sgd<float>(const KernelContext&, const Sgd<float>&, const fn::SgdUpdate&);
template void sgd<double>(const KernelContext&, const Sgd<double>&, const fn::SgdUpdate&);
template void adam<float>(const KernelContext&, const Adam<float>&, const fn::AdamUpdate&);
template void adam<double>(const KernelContext&, const Adam<double>&, const fn::AdamUpdate&);
template void increment<int32_t>(const KernelContext&, const Increment<int32_t>&, const NoExtra&);
template void increment<int64_t>(const KernelContext&, const Increment<int64_t>&, const NoExtra&);
template void warmup_cosine<float>(const KernelContext&, const LrSchedule<float>&,
                                   const fn::WarmupCosine&);
template void warmup_cosine<double>(const KernelContext&, const LrSchedule<double>&,
                                    const fn::WarmupCosine&);

}  // namespace tide::kernels::cpu
