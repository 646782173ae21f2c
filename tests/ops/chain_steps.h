// Building fused chains (ops/fused_chain.h) by hand in tests: operands and steps.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/fused_chain.h"

namespace tide::kernels::test_chain {

inline ChainOperand mem(const void* p, uint8_t stride = 1) {
  ChainOperand o;
  o.kind = ChainOperand::mem;
  o.ptr = p;
  o.stride = stride;
  return o;
}
inline ChainOperand reg(uint8_t r) {
  ChainOperand o;
  o.kind = ChainOperand::reg;
  o.reg_index = r;
  return o;
}
// A float32 scalar (its bits, as a float32 chain reads them).
inline ChainOperand scalar(float v) {
  ChainOperand o;
  std::memcpy(&o.scalar_bits, &v, sizeof v);
  return o;
}
inline ChainStep step(FunctorId f, ChainOperand a, ChainOperand b, ChainOperand out,
                      int64_t repeat = 1) {
  ChainStep s;
  s.functor = f;
  s.a = a;
  s.b = b;
  s.out = out;
  s.repeat = repeat;
  return s;
}

}  // namespace tide::kernels::test_chain
