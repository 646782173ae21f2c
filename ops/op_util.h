// Helpers shared by the op families: argument checks (which throw "[op] ..." before anything
// is queued) and the queueing shorthand. Not a public header.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/op_traits.h"

namespace tide::detail {

// Elementwise loops below this many elements run inline on the worker.
inline constexpr int64_t kParallelGrain = 32768;
// The parallel_for grain (items per task) for items of `work_per_item` elements each: about
// kParallelGrain elements a task, and at least one item.
inline int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, work_per_item));
}

inline std::string describe(const Tensor& t) {
  return t.shape().str() + " " + std::string(name(t.dtype()));
}

inline void check_defined(const Tensor& t, const char* op) {
  TIDE_CHECK(t.defined(), op, "got an undefined tensor");
}
// Throws "[op] has no CUDA kernel ..." unless op_supported(t.device(), id) (docs/contributing.md,
// Backends).
void throw_unsupported(const Tensor& t, OpId id);
// Also throws "[op] bfloat16 is not supported yet: cast to float32 first" for a 16-bit
// tensor unless op's row accepts them (OpTraits::half).
inline void check_supported(const Tensor& t, OpId id) {
  if (t.device().is_cpu() && !is_half(t.dtype())) [[likely]]
    return;
  if (!op_supports_dtype(id, t.dtype())) throw_half_unsupported(t.dtype(), op_name(id));
  if (!t.device().is_cpu() && !op_supported(t.device(), id)) throw_unsupported(t, id);
}
void throw_unsupported(Device d, OpId id);
inline void check_device_supported(Device d, OpId id) {
  if (d.is_cpu()) [[likely]]
    return;
  if (!op_supported(d, id)) throw_unsupported(d, id);
}
// For ops that take the dtype to create as an argument (randn, rand).
inline void check_dtype_supported(DType t, OpId id) {
  if (!op_supports_dtype(id, t)) [[unlikely]]
    throw_half_unsupported(t, op_name(id));
}
inline void check_same(const Tensor& a, const Tensor& b, OpId id) {
  const char* op = op_name(id);
  check_defined(a, op);
  check_defined(b, op);
  TIDE_CHECK(a.dtype() == b.dtype(), op, "dtypes differ: ", describe(a), " and ", describe(b));
  TIDE_CHECK(a.device() == b.device(), op, "devices differ: ", a.device().str(), " and ",
             b.device().str(), " (move one with .to(device) first)");
  check_supported(a, id);
}
inline void check_floating(const Tensor& a, const char* op) {
  TIDE_CHECK(is_floating(a.dtype()), op, "needs a floating tensor, got ", describe(a));
}

// Queues fn on the calling thread's current stream of `device`.
template <class F>
void launch(const char* op, Device device, std::initializer_list<Storage*> reads,
            std::initializer_list<Storage*> writes, F&& fn, Site site) {
  Engine::get().submit(device, op, reads, writes, std::forward<F>(fn), site);
}

}  // namespace tide::detail
