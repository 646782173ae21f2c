// Autocast: a scoped mixed-precision policy for the calling thread (DESIGN §12). Inside an
// Autocast guard the ops apply their row of the policy to floating inputs before they run:
//   low:      matmul, linear, conv2d, scaled_dot_product_attention(_packed) cast float32
//             inputs to the guard's dtype (bfloat16 or float16) and run there;
//   float32:  softmax, log_softmax, layer_norm, batch_norm, the losses, sum, mean,
//             sum_squares, exp, log and pow cast 16-bit inputs to float32;
//   promote:  binary elementwise ops given two floating dtypes cast the narrower operand to
//             the wider (an in-place op casts the other operand to its own dtype);
//   the rest run in the dtype they are given.
// The casts are ordinary queued, differentiable cast ops, so a traced step records them and
// traced == eager stays bitwise. A leaf that requires grad (a parameter) is cast once per
// outermost guard: later uses in the same guard share that cast (its gradient accumulates
// there); an optimizer step drops the cache (clear_cache), so a guard that spans several
// steps still casts the updated weights. Put the guard around a step's forward and loss.
// backward() runs with autocast suspended: gradients keep the dtypes of the forward.
// Not thread-shared: each thread has its own policy and cache.
#pragma once

#include <initializer_list>
#include <optional>

#include "core/dtype.h"
#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

class Autocast {
 public:
  // Turns the policy on for this thread with `low` as the GEMM dtype, until destroyed
  // (nested guards restore the outer policy). enabled = false suspends the policy within
  // the scope. Throws "[autocast]" unless low is bfloat16 or float16.
  explicit Autocast(DType low = DType::bfloat16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> prev_;
  bool counted_;  // an enabled guard: the outermost one clears the cache
};

namespace autocast {

// The low dtype of this thread's active policy, or nullopt when none is active.
std::optional<DType> active();

// For op front-ends, which call themselves again with the cast tensors when one of these
// returns true. Each leaves undefined, non-floating and already-fitting tensors as they are,
// and does nothing when no policy is active.
// lower: float32 tensors cast to the low dtype (a leaf that requires grad through the cache).
bool lower(std::initializer_list<Tensor*> ts, Site site = Site::current());
// raise: 16-bit tensors cast to float32.
bool raise(std::initializer_list<Tensor*> ts, Site site = Site::current());
// promote: the narrower of two floating tensors cast to promoted(a, b).
bool promote(Tensor& a, Tensor& b, Site site = Site::current());
// match: b cast to a's dtype when both are floating (in-place ops write a).
bool match(const Tensor& a, Tensor& b, Site site = Site::current());

// Drops this thread's cached casts (Optimizer::step calls it: the weights change).
void clear_cache();

// The wider of two floating dtypes (float64 > float32 > float16, bfloat16; float16 and
// bfloat16 give float32).
DType promoted(DType a, DType b);

// Suspends the policy within its scope (backward(), and the float32 path of 16-bit operands:
// ops/half_compute.h); keeps the cache.
class Suspend {
 public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  std::optional<DType> prev_;
};

// Sets this thread's policy to `low` (nullopt: none) within its scope, with every cast made
// fresh (the cache is neither read nor written): checkpoint's recompute restores the policy
// its first run saw, and its graph must not reach casts made outside it.
class Restore {
 public:
  explicit Restore(std::optional<DType> low);
  ~Restore();
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  std::optional<DType> prev_;
  bool prev_bypass_;
};

}  // namespace autocast
}  // namespace tide
