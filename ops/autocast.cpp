// Autocast (ops/autocast.h): the thread's policy, its per-guard cache of parameter casts and
// the casts the op front-ends ask for.
#include "ops/autocast.h"

#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "ops/autograd.h"
#include "ops/creation.h"

namespace tide {
namespace {

struct State {
  std::optional<DType> low;  // the active policy's GEMM dtype
  int guards = 0;            // enabled Autocast guards alive on this thread
  bool bypass = false;       // Restore: every cast fresh (checkpoint's recompute)
  // Casts of leaves that require grad, by the leaf; holding the leaf keeps its address from
  // being reused by another tensor while the entry lives.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> cache;
};

State& state() {
  thread_local State s;
  return s;
}

bool floating(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

// t as the low dtype: a leaf that requires grad goes through the cache while recording.
Tensor low_cast(State& s, const Tensor& t, Site site) {
  if (s.bypass || !(t.is_leaf() && t.requires_grad() && autograd::grad_enabled()))
    return cast(t, *s.low, site);
  auto it = s.cache.find(&t.impl());
  if (it != s.cache.end() && it->second.second.dtype() == *s.low) return it->second.second;
  Tensor c = cast(t, *s.low, site);
  s.cache[&t.impl()] = {t, c};
  return c;
}

}  // namespace

Autocast::Autocast(DType low, bool enabled) : prev_(state().low), counted_(enabled) {
  TIDE_CHECK(is_half(low), "autocast", "the low dtype must be bfloat16 or float16, got ", low);
  State& s = state();
  if (!enabled) {
    s.low.reset();
    return;
  }
  ++s.guards;
  s.low = low;
}

Autocast::~Autocast() {
  State& s = state();
  s.low = prev_;
  if (counted_ && --s.guards == 0) s.cache.clear();  // the outermost guard ends
}

namespace autocast {

std::optional<DType> active() { return state().low; }

void clear_cache() { state().cache.clear(); }

DType promoted(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::float64 || b == DType::float64) return DType::float64;
  return DType::float32;  // float32 with a 16-bit type, or the two 16-bit types
}

bool lower(std::initializer_list<Tensor*> ts, Site site) {
  State& s = state();
  if (!s.low) return false;
  bool any = false;
  for (Tensor* t : ts)
    if (t->defined() && t->dtype() == DType::float32) {
      *t = low_cast(s, *t, site);
      any = true;
    }
  return any;
}

bool raise(std::initializer_list<Tensor*> ts, Site site) {
  if (!state().low) return false;
  bool any = false;
  for (Tensor* t : ts)
    if (t->defined() && is_half(t->dtype())) {
      *t = cast(*t, DType::float32, site);
      any = true;
    }
  return any;
}

bool promote(Tensor& a, Tensor& b, Site site) {
  if (!state().low || !floating(a) || !floating(b) || a.dtype() == b.dtype()) return false;
  const DType to = promoted(a.dtype(), b.dtype());
  if (a.dtype() != to) a = cast(a, to, site);
  if (b.dtype() != to) b = cast(b, to, site);
  return true;
}

bool match(const Tensor& a, Tensor& b, Site site) {
  if (!state().low || !floating(a) || !floating(b) || a.dtype() == b.dtype()) return false;
  b = cast(b, a.dtype(), site);
  return true;
}

Suspend::Suspend() : prev_(state().low) { state().low.reset(); }
Suspend::~Suspend() { state().low = prev_; }

Restore::Restore(std::optional<DType> low) : prev_(state().low), prev_bypass_(state().bypass) {
  state().low = low;
  state().bypass = true;
}
Restore::~Restore() {
  state().low = prev_;
  state().bypass = prev_bypass_;
}

}  // namespace autocast
}  // namespace tide
