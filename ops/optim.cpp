// Fused optimizer updates (see optim.h): argument checks, then one queued kernel per
// parameter whose CPU loop applies fn::SgdUpdate / fn::AdamUpdate over the elements, split
// over the intra-op thread pool above kParallelGrain like the elementwise loops. The kernels
// read lr and the step count from their tensors when they run.
#include "ops/optim.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/failure.h"
#include "ops/autograd.h"
#include "ops/functors.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;

namespace {

// ---- checks (all before anything is queued) ---------------------------------------------

void check_operand(const Tensor& t, const char* what, const char* op) {
  TIDE_CHECK(t.defined(), op, what, " is an undefined tensor");
  TIDE_CHECK(t.device().is_cpu(), op, "has no kernel for device ", t.device().str(),
             " in this build (", what, " is on ", t.device().str(), ")");
}

void check_param(const Tensor& p, const char* op) {
  check_operand(p, "param", op);
  TIDE_CHECK(is_floating(p.dtype()), op, "param must be float32 or float64, got ",
             describe(p));
}

// `t` must match the parameter in shape, dtype and device (grad and state tensors).
void check_like(const Tensor& t, const char* what, const Tensor& p, const char* op) {
  check_operand(t, what, op);
  TIDE_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype() && t.device() == p.device(), op,
             what, " ", describe(t), " on ", t.device().str(), " differs from param ",
             describe(p), " on ", p.device().str(),
             " (expected the parameter's shape, dtype and device)");
}

// A one-element hyper-parameter tensor (lr: the parameter's dtype; step: int64).
void check_scalar(const Tensor& t, const char* what, DType dtype, const Tensor& p,
                  const char* op) {
  check_operand(t, what, op);
  TIDE_CHECK(t.numel() == 1 && t.dtype() == dtype && t.device() == p.device(), op, what,
             " must be a one-element ", name(dtype), " tensor on ", p.device().str(),
             ", got ", describe(t), " on ", t.device().str());
}

void check_writable(const Tensor& t, const char* what, const char* op) {
  TIDE_CHECK(!(t.requires_grad() && autograd::grad_enabled()), op, "cannot update ", what, " ",
             describe(t), " in place: it requires grad and grad mode is on; use NoGrad (as "
             "optimizers do)");
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  int64_t a0 = a.offset() * int64_t(size_of(a.dtype())), a1 = a0 + int64_t(a.nbytes());
  int64_t b0 = b.offset() * int64_t(size_of(b.dtype())), b1 = b0 + int64_t(b.nbytes());
  return a0 < b1 && b0 < a1;
}

struct Operand {
  const Tensor& t;
  const char* what;
  bool written;
};

// A written tensor sharing memory with another operand would read elements already
// updated (or update them twice): refuse. Pairs are checked by position, so the same
// handle passed twice is caught too.
void check_no_overlap(std::initializer_list<Operand> all, const char* op) {
  for (auto a = all.begin(); a != all.end(); ++a)
    for (auto b = a + 1; b != all.end(); ++b) {
      if (!a->written && !b->written) continue;
      const Operand& w = a->written ? *a : *b;
      const Operand& o = a->written ? *b : *a;
      TIDE_CHECK(!overlaps(w.t, o.t), op, w.what, " ", describe(w.t),
                 " is written in place but shares memory with ", o.what, " ", describe(o.t),
                 " (expected separate tensors; clone() one of them)");
    }
}

// adam_update_ lists m and v as writes only (reads + writes must fit the task record's
// eight storages), so the engine does not skip the kernel when they carry an earlier
// failure: the kernel refuses them itself and the failure reaches p, m and v.
void check_not_failed(const Storage* s, const char* what) {
  if (const Failure* f = s->failure())
    throw std::runtime_error(std::string(what) + " holds the failure of an earlier op: " +
                             f->what());
}

// ---- CPU kernels ----------------------------------------------------------------------------
// Closures resolve their data pointers when they run (DataRef, storage slots): a traced
// replay may rebind the storages. Each fits the engine's inline task payload, so queueing
// an update allocates nothing.

template <class T>
struct SgdKernel {
  DataRef<T> p, g, buf, lr;  // buf.s == nullptr without momentum
  int64_t n;
  fn::SgdUpdate f;

  void operator()() const {
    // lr is read when the kernel runs, not at enqueue.
    const fn::SgdUpdate::Factors<T> k = f.factors(*lr.get());
    T* pp = p.get();
    const T* gg = g.get();
    T* bb = buf.s ? buf.get() : nullptr;
    const fn::SgdUpdate fl = f;
    parallel_for(n, kParallelGrain, [pp, gg, bb, k, fl](int64_t lo, int64_t hi) {
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
};

// Six operands and the options do not fit the payload with DataRef's 64-bit offsets, so
// the offsets are packed as Off: uint32_t normally, int64_t (a heap-held closure) only for
// tensors that start past 2^32 elements into their storage.
template <class T, class Off>
struct AdamKernel {
  Storage* s[6];  // p, g, m, v, lr, step
  Off off[6];
  int64_t n;
  fn::AdamUpdate f;

  template <class U>
  U* at(int i) const {
    return static_cast<U*>(s[i]->data()) + off[i];
  }
  void operator()() const {
    check_not_failed(s[2], "m");
    check_not_failed(s[3], "v");
    const int64_t t = *at<int64_t>(5);  // read when the kernel runs, not at enqueue
    // Kernel errors are plain exceptions: the engine prefixes "[adam_update_]" and the site.
    if (t < 1)
      throw std::runtime_error("step count " + std::to_string(t) +
                               " < 1 (expected the number of this update; queue "
                               "increment_(step) first)");
    const fn::AdamUpdate::Factors<T> k = f.factors(*at<T>(4), t);
    T* pp = at<T>(0);
    const T* gg = at<T>(1);
    T* mm = at<T>(2);
    T* vv = at<T>(3);
    const fn::AdamUpdate fl = f;
    parallel_for(n, kParallelGrain, [pp, gg, mm, vv, k, fl](int64_t lo, int64_t hi) {
      // Locals, restrict-qualified: the loop vectorises (the operands never overlap).
      const fn::AdamUpdate::Factors<T> kk = k;
      T* __restrict pr = pp;
      const T* __restrict gr = gg;
      T* __restrict mr = mm;
      T* __restrict vr = vv;
      for (int64_t i = lo; i < hi; ++i) fl(pr[i], gr[i], mr[i], vr[i], kk);
    });
  }
};
static_assert(sizeof(SgdKernel<double>) <= Engine::kInlinePayload);
static_assert(sizeof(AdamKernel<double, uint32_t>) <= Engine::kInlinePayload);

}  // namespace

// ---- front-ends -------------------------------------------------------------------------------

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const Tensor& lr,
                 const SgdUpdateOptions& o, Site site) {
  const char* op = op_name(OpId::sgd_update_);
  check_param(param, op);
  check_like(grad, "grad", param, op);
  check_scalar(lr, "lr", param.dtype(), param, op);
  TIDE_CHECK(o.momentum_ >= 0 && o.dampening_ >= 0 && o.weight_decay_ >= 0, op,
             "invalid options: momentum ", o.momentum_, ", dampening ", o.dampening_,
             ", weight decay ", o.weight_decay_, " (expected each >= 0)");
  TIDE_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0), op,
             "Nesterov momentum requires a momentum > 0 and zero dampening (momentum ",
             o.momentum_, ", dampening ", o.dampening_, ")");
  const bool with_buf = o.momentum_ != 0;
  check_writable(param, "param", op);
  if (with_buf) {
    check_like(momentum_buf, "momentum_buf", param, op);
    check_writable(momentum_buf, "momentum_buf", op);
    check_no_overlap({{param, "param", true},
                      {grad, "grad", false},
                      {momentum_buf, "momentum_buf", true},
                      {lr, "lr", false}},
                     op);
  } else {
    check_no_overlap({{param, "param", true}, {grad, "grad", false}, {lr, "lr", false}}, op);
  }
  fn::SgdUpdate f{o.momentum_, o.dampening_, o.weight_decay_, o.nesterov_, o.fresh_state_};
  dispatch_floating(param.dtype(), [&](auto z) {
    using T = decltype(z);
    const int64_t n = param.numel();
    if (with_buf) {
      launch(op, param.device(), {param.storage(), grad.storage(), momentum_buf.storage(), lr.storage()},
             {param.storage(), momentum_buf.storage()},
             SgdKernel<T>{param.ref<T>(), grad.ref<T>(), momentum_buf.ref<T>(), lr.ref<T>(), n, f},
             site);
    } else {
      launch(op, param.device(), {param.storage(), grad.storage(), lr.storage()}, {param.storage()},
             SgdKernel<T>{param.ref<T>(), grad.ref<T>(), DataRef<T>{}, lr.ref<T>(), n, f}, site);
    }
  });
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& lr,
                  const Tensor& step, const AdamUpdateOptions& o, Site site) {
  const char* op = op_name(OpId::adam_update_);
  check_param(param, op);
  check_like(grad, "grad", param, op);
  check_like(m, "m", param, op);
  check_like(v, "v", param, op);
  check_scalar(lr, "lr", param.dtype(), param, op);
  check_scalar(step, "step", DType::int64, param, op);
  TIDE_CHECK(o.beta1_ >= 0 && o.beta1_ < 1 && o.beta2_ >= 0 && o.beta2_ < 1, op,
             "invalid betas (", o.beta1_, ", ", o.beta2_, ") (expected each in [0, 1))");
  TIDE_CHECK(o.eps_ >= 0 && o.weight_decay_ >= 0, op, "invalid eps ", o.eps_,
             " or weight decay ", o.weight_decay_, " (expected each >= 0)");
  check_writable(param, "param", op);
  check_writable(m, "m", op);
  check_writable(v, "v", op);
  check_no_overlap({{param, "param", true},
                    {grad, "grad", false},
                    {m, "m", true},
                    {v, "v", true},
                    {lr, "lr", false},
                    {step, "step", false}},
                   op);
  fn::AdamUpdate f{o.beta1_, o.beta2_, o.eps_, o.weight_decay_, o.decoupled_, o.fresh_state_};
  const Tensor* ts[6] = {&param, &grad, &m, &v, &lr, &step};
  bool compact = true;
  for (const Tensor* t : ts) compact = compact && t->offset() <= int64_t(UINT32_MAX);
  dispatch_floating(param.dtype(), [&](auto z) {
    using T = decltype(z);
    auto go = [&](auto k) {
      for (int i = 0; i < 6; ++i) {
        k.s[i] = ts[i]->storage();
        k.off[i] = std::remove_reference_t<decltype(k.off[0])>(ts[i]->offset());
      }
      // Reads: p, grad, lr, step; m and v are in the writes only (see check_not_failed).
      launch(op, param.device(), {param.storage(), grad.storage(), lr.storage(), step.storage()},
             {param.storage(), m.storage(), v.storage()}, k, site);
    };
    if (compact) go(AdamKernel<T, uint32_t>{{}, {}, param.numel(), f});
    else go(AdamKernel<T, int64_t>{{}, {}, param.numel(), f});
  });
}

void increment_(Tensor& counter, Site site) {
  const char* op = op_name(OpId::increment_);
  check_operand(counter, "counter", op);
  TIDE_CHECK((counter.dtype() == DType::int64 || counter.dtype() == DType::int32) &&
                 counter.numel() == 1,
             op, "counter must be a one-element int32 or int64 tensor, got ",
             describe(counter));
  check_writable(counter, "counter", op);
  Storage* s = counter.storage();
  if (counter.dtype() == DType::int64)
    launch(op, counter.device(), {s}, {s}, [c = counter.ref<int64_t>()] { *c.get() += 1; }, site);
  else
    launch(op, counter.device(), {s}, {s}, [c = counter.ref<int32_t>()] { *c.get() += 1; }, site);
}

}  // namespace tide
