// FunctorId: every elementwise functor of ops/functors.h's lists, numbered in the lists'
// order. The op table names the functor each elementwise op applies (ops/op_traits.h) and a
// fused chain's steps name theirs (ops/fused_chain.h); the CPU and CUDA kernel files
// instantiate every listed functor.
#pragma once

#include <cstdint>

#include "ops/functors.h"

namespace tide::kernels {

enum class FunctorId : uint8_t {
#define TIDE_FUNCTOR_ID(F) F,
  TIDE_BINARY_FUNCTORS(TIDE_FUNCTOR_ID) TIDE_MASK_FUNCTORS(TIDE_FUNCTOR_ID)
      TIDE_UNARY_FUNCTORS(TIDE_FUNCTOR_ID)
#undef TIDE_FUNCTOR_ID
          count_  // not a listed functor: a chain with it cannot be fused for a GPU
};

template <class F>
struct FunctorIdOf {
  static constexpr FunctorId value = FunctorId::count_;
};
#define TIDE_FUNCTOR_ID_OF(F)                        \
  template <>                                        \
  struct FunctorIdOf<fn::F> {                        \
    static constexpr FunctorId value = FunctorId::F; \
  };
TIDE_BINARY_FUNCTORS(TIDE_FUNCTOR_ID_OF)
TIDE_MASK_FUNCTORS(TIDE_FUNCTOR_ID_OF)
TIDE_UNARY_FUNCTORS(TIDE_FUNCTOR_ID_OF)
#undef TIDE_FUNCTOR_ID_OF

// Whether functor f is a mask (a comparison: 0/1 in the input's floating dtype).
constexpr bool is_mask_functor(FunctorId f) {
#define TIDE_IS_MASK(F) \
  if (f == FunctorId::F) return true;
  TIDE_MASK_FUNCTORS(TIDE_IS_MASK)
#undef TIDE_IS_MASK
  return false;
}

}  // namespace tide::kernels
