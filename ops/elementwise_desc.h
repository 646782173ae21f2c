// What the trace fusion pass (trace/fusion.cpp) knows about one flat elementwise op: its
// row traits, operands and a function that runs its functor over a block of elements.
// Elementwise front-ends attach one to the kernel they queue while a trace records;
// broadcasting ops (general geometry) do not, and stay unfused.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/storage.h"
#include "ops/elementwise_cpu.h"
#include "ops/op_traits.h"

namespace tide::detail {

struct EwOperand {
  Storage* storage = nullptr;  // nullptr: the scalar below
  int64_t offset = 0;          // elements
  int64_t stride = 1;          // 1, or 0 for a one-element tensor repeated
  alignas(8) unsigned char scalar[8] = {};
};

// o[i] = f(a[i*sa], b[i*sb]) (unary: f(a[i*sa])) for i < n; `functor` points at F.
using EwBlockFn = void (*)(const void* functor, const void* a, int64_t sa, const void* b,
                           int64_t sb, void* o, int64_t n);

struct ElementwiseDesc {
  OpId id;
  int arity = 2;
  DType in = DType::float32, out = DType::float32;
  int64_t n = 0;
  EwOperand a, b;
  Storage* out_storage = nullptr;
  int64_t out_offset = 0;
  EwBlockFn block = nullptr;
  alignas(8) unsigned char functor[16] = {};
};

template <class O, class T, class F>
void ew_binary_block(const void* f, const void* a, int64_t sa, const void* b, int64_t sb,
                     void* o, int64_t n) {
  binary_row(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<O*>(o),
             n, *static_cast<const F*>(f));
}

template <class O, class T, class F>
void ew_unary_block(const void* f, const void* a, int64_t sa, const void*, int64_t, void* o,
                    int64_t n) {
  const T* pa = static_cast<const T*>(a);
  O* po = static_cast<O*>(o);
  const F& fn = *static_cast<const F*>(f);
  if (sa == 1)
    for (int64_t i = 0; i < n; ++i) po[i] = O(fn(pa[i]));
  else
    for (int64_t i = 0; i < n; ++i) po[i] = O(fn(*pa));
}

template <class F>
void store_functor(ElementwiseDesc& d, const F& f) {
  static_assert(sizeof(F) <= sizeof(d.functor) && std::is_trivially_copyable_v<F>);
  std::memcpy(d.functor, &f, sizeof(F));
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
