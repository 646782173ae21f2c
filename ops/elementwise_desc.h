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
#include "ops/cpu/elementwise_loops.h"
#include "ops/fused_chain.h"
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

// A loop body of this one op, state in o: o[i] = f(o[i], b[i*sb]) (unary: f(o[i])) applied
// `iterations` times, each element's chain kept in registers. Only for ops whose output
// dtype is their input dtype; the same functor in the same order, so the same bits as
// `iterations` separate ops.
using EwIterateFn = void (*)(const void* functor, const void* b, int64_t sb, void* o, int64_t n,
                             int64_t iterations);

struct ElementwiseDesc {
  OpId id;
  int arity = 2;
  DType in = DType::float32, out = DType::float32;
  int64_t n = 0;
  EwOperand a, b;
  Storage* out_storage = nullptr;
  int64_t out_offset = 0;
  EwBlockFn block = nullptr;
  EwIterateFn iterate = nullptr;  // set when out == in
  alignas(8) unsigned char functor[16] = {};
  kernels::FunctorId functor_id = kernels::FunctorId::count_;  // for a GPU's fused chains
};

template <class O, class T, class F>
void ew_binary_block(const void* f, const void* a, int64_t sa, const void* b, int64_t sb, void* o,
                     int64_t n) {
  binary_row(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<O*>(o), n,
             *static_cast<const F*>(f));
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

template <class T, class F, int kArity>
void ew_iterate(const void* f, const void* b, int64_t sb, void* o, int64_t n, int64_t iterations) {
  const F& fn = *static_cast<const F*>(f);
  T* po = static_cast<T*>(o);
  const T* pb = static_cast<const T*>(b);
  constexpr int64_t kLanes = 16;  // independent chains interleaved: latency hidden
  for (int64_t i0 = 0; i0 < n; i0 += kLanes) {
    const int64_t len = n - i0 < kLanes ? n - i0 : kLanes;
    T x[kLanes] = {}, y[kLanes] = {};
    for (int64_t j = 0; j < len; ++j) {
      x[j] = po[i0 + j];
      if constexpr (kArity == 2) y[j] = pb[(i0 + j) * sb];
    }
    // All lanes every time (a fixed trip count vectorises; unused lanes hold zeros and
    // are never stored).
    for (int64_t it = 0; it < iterations; ++it)
      for (int64_t j = 0; j < kLanes; ++j) {
        if constexpr (kArity == 2) x[j] = T(fn(x[j], y[j]));
        else x[j] = T(fn(x[j]));
      }
    for (int64_t j = 0; j < len; ++j) po[i0 + j] = x[j];
  }
}

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
