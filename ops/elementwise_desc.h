// What the trace fusion pass (trace/fusion.cpp) knows about one flat elementwise op: its
// row traits, operands and its functor (by id, with its parameters' bytes), from which
// the fused chain's kernels (ops/fused_chain.h) run it.
// Elementwise front-ends attach one to the kernel they queue while a trace records;
// broadcasting ops (general geometry) do not, and stay unfused.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/storage.h"
#include "ops/fused_chain.h"
#include "ops/op_traits.h"

namespace tide::detail {

struct EwOperand {
  Storage* storage = nullptr;  // nullptr: the scalar below
  int64_t offset = 0;          // elements
  int64_t stride = 1;          // 1, or 0 for a one-element tensor repeated
  alignas(8) unsigned char scalar[8] = {};
};

struct ElementwiseDesc {
  OpId id;
  int arity = 2;
  DType in = DType::float32, out = DType::float32;
  int64_t n = 0;
  EwOperand a, b;
  Storage* out_storage = nullptr;
  int64_t out_offset = 0;
  alignas(8) unsigned char functor[16] = {};
  kernels::FunctorId functor_id = kernels::FunctorId::count_;
};

// Stateless functors (Add, Tanh, ...) copy nothing: the byte of an empty class is
// indeterminate, and the fusion pass compares functor bytes to find identical steps.
template <class F>
void store_functor(ElementwiseDesc& d, const F& f) {
  static_assert(sizeof(F) <= sizeof(d.functor) && std::is_trivially_copyable_v<F>);
  if constexpr (!std::is_empty_v<F>) std::memcpy(d.functor, &f, sizeof(F));
}

template <class T>
EwOperand tensor_operand(const DataRef<T>& r, int64_t stride) {
  EwOperand o;
  o.storage = r.s;
  o.offset = r.offset;
  o.stride = stride;
  return o;
}

template <class T>
EwOperand scalar_operand(T v) {
  static_assert(sizeof(T) <= 8);
  EwOperand o;
  o.stride = 0;
  std::memcpy(o.scalar, &v, sizeof(T));
  return o;
}

}  // namespace tide::detail
