// CPU implementations of the elementwise kernel entries (ops/elementwise_kernels.h): the
// loops of elementwise_loops.h over the functors of ops/functors.h, instantiated for every
// functor of its lists and every dtype (the 16-bit ones computing in float).
#include <type_traits>

#include "ops/cpu/elementwise_loops.h"
#include "ops/cpu/gelu_rows.h"
#include "ops/cpu/isa_parallel.h"
#include "ops/elementwise_kernels.h"
#include "ops/functors.h"

namespace tide::kernels::cpu {

using tide::detail::isa_parallel_for;
using tide::detail::kParallelGrain;

// GELU's tanh form and its gradient on contiguous float32 and 16-bit tensors: about 25
// operations an element (fn::exp_nonpositive's polynomial), so their loops run compiled for
// the widest vector ISA (16 lanes instead of the baseline's 4). Only the width changes, not
// the arithmetic, so the bits are the baseline's, as the traced fused chains compute them.
// The other functors stay on the baseline: memory-bound, and the wide copies slowed the
// whole GPT step when every loop had them. The loops are written out here rather than
// calling elementwise_loops.h's, whose helpers are not always_inline and would stay narrow.
template <class F>
constexpr bool kGeluFunctor =
    std::is_same_v<F, fn::GeluTanh> || std::is_same_v<F, fn::GeluTanhGrad>;
template <class F, class T>
constexpr bool kWideLoop = kGeluFunctor<F> && (std::is_same_v<T, float> || is_half_v<T>);

template <class O, class T, class F>
void binary_flat(const KernelContext&, const BinaryFlat<O, T>& a, const F& f) {
  if constexpr (kWideLoop<F, T>) {
    if (a.sa == 1 && a.sb == 1) {
      const T* pa = a.a.get();
      const T* pb = a.b.get();
      O* po = a.out.get();
      isa_parallel_for(
          a.n, kParallelGrain, [&](int64_t lo, int64_t hi) __attribute__((always_inline)) {
            for (int64_t i = lo; i < hi; ++i) po[i] = O(f(widen(pa[i]), widen(pb[i])));
          });
      return;
    }
  }
  tide::detail::binary_flat(a.a.get(), a.sa, a.b.get(), a.sb, a.out.get(), a.n, f);
}

template <class O, class T, class F>
void binary_broadcast(const KernelContext&, const BinaryBroadcast<O, T>& a, const F& f) {
  tide::detail::binary_broadcast(a.a.get(), a.b.get(), a.out.get(), a.g, f);
}

template <class O, class T, class F>
void scalar_flat(const KernelContext&, const ScalarFlat<O, T>& a, const F& f) {
  const compute_t<T> s = a.s;
  if (a.scalar_first) tide::detail::binary_flat(&s, 0, a.a.get(), 1, a.out.get(), a.n, f);
  else tide::detail::binary_flat(a.a.get(), 1, &s, 0, a.out.get(), a.n, f);
}

template <class T, class F>
void unary_flat(const KernelContext&, const UnaryFlat<T>& a, const F& f) {
  if constexpr (kWideLoop<F, T>) {
    const T* pa = a.a.get();
    T* po = a.out.get();
    isa_parallel_for(
        a.n, kParallelGrain, [&](int64_t lo, int64_t hi) __attribute__((always_inline)) {
          for (int64_t i = lo; i < hi; ++i) po[i] = T(f(widen(pa[i])));
        });
  } else {
    tide::detail::unary_flat(a.a.get(), a.out.get(), a.n, f);
  }
}

template <class T>
void gelu_tanh_serial(const T* x, T* y, int64_t n) {
  const fn::GeluTanh f{};
  if constexpr (kWideLoop<fn::GeluTanh, T>) {
    tide::detail::isa_run([&]() __attribute__((always_inline)) {
      for (int64_t i = 0; i < n; ++i) y[i] = T(f(widen(x[i])));
    });
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = T(f(widen(x[i])));
  }
}
template void gelu_tanh_serial<float>(const float*, float*, int64_t);
template void gelu_tanh_serial<double>(const double*, double*, int64_t);
template void gelu_tanh_serial<bfloat16>(const bfloat16*, bfloat16*, int64_t);
template void gelu_tanh_serial<float16>(const float16*, float16*, int64_t);

template <class O, class T>
void convert(const KernelContext&, const Convert<O, T>& a, const NoExtra&) {
  const T* pa = a.a.get();
  O* po = a.out.get();
  parallel_for(a.n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = fn::convert<O>(pa[i]);
  });
}

// ---- instantiations: every functor, every dtype ------------------------------------------

#define TIDE_BINARY_FOR_T(T, F)                                                                   \
  template void binary_flat<fn::binary_out_t<fn::F, T>, T, fn::F>(                                \
      const KernelContext&, const BinaryFlat<fn::binary_out_t<fn::F, T>, T>&, const fn::F&);      \
  template void binary_broadcast<fn::binary_out_t<fn::F, T>, T, fn::F>(                           \
      const KernelContext&, const BinaryBroadcast<fn::binary_out_t<fn::F, T>, T>&, const fn::F&); \
  template void scalar_flat<fn::binary_out_t<fn::F, T>, T, fn::F>(                                \
      const KernelContext&, const ScalarFlat<fn::binary_out_t<fn::F, T>, T>&, const fn::F&);
// clang-format off
#define TIDE_BINARY(F) \
  TIDE_BINARY_FOR_T(float, F) TIDE_BINARY_FOR_T(double, F) TIDE_BINARY_FOR_T(int32_t, F) \
  TIDE_BINARY_FOR_T(int64_t, F) TIDE_BINARY_FOR_T(bfloat16, F) TIDE_BINARY_FOR_T(float16, F)
// clang-format on
TIDE_BINARY_FUNCTORS(TIDE_BINARY)
TIDE_MASK_FUNCTORS(TIDE_BINARY)

#define TIDE_UNARY_FOR_T(T, F) \
  template void unary_flat<T, fn::F>(const KernelContext&, const UnaryFlat<T>&, const fn::F&);
// clang-format off
#define TIDE_UNARY(F) \
  TIDE_UNARY_FOR_T(float, F) TIDE_UNARY_FOR_T(double, F) TIDE_UNARY_FOR_T(int32_t, F) \
  TIDE_UNARY_FOR_T(int64_t, F) TIDE_UNARY_FOR_T(bfloat16, F) TIDE_UNARY_FOR_T(float16, F)
// clang-format on
TIDE_UNARY_FUNCTORS(TIDE_UNARY)

#define TIDE_CONVERT_TO(O, T) \
  template void convert<O, T>(const KernelContext&, const Convert<O, T>&, const NoExtra&);
// clang-format off
#define TIDE_CONVERT_FROM(T) \
  TIDE_CONVERT_TO(float, T) TIDE_CONVERT_TO(double, T) TIDE_CONVERT_TO(int32_t, T) \
  TIDE_CONVERT_TO(int64_t, T) TIDE_CONVERT_TO(bfloat16, T) TIDE_CONVERT_TO(float16, T)
// clang-format on
TIDE_STORAGE_DTYPES(TIDE_CONVERT_FROM)

}  // namespace tide::kernels::cpu
