// A fused elementwise chain as data (docs/traced.md, On a GPU): the one form of a trace's
// fused node, on every device. Each step names its functor (FunctorId, from ops/functors.h's
// lists), its parameters (the functor's bytes) and where its operands are (a register, memory, a
// scalar); one interpreter, compiled by g++ and by nvcc, evaluates the chain per element.
// The CPU entry (ops/cpu/fused_chain.cpp) runs the same steps block by block, on the CPU and
// on a host-kernel fake GPU; the CUDA entry (ops/cuda/fused.cu) is one grid-stride kernel
// over the elements.
//
// The same functors in the same type and order as the unfused ops, so the results are
// the same bits: tide's CUDA code is compiled without FMA contraction (--fmad=false,
// CMakeLists.txt), so no step's multiply is joined to the next step's add into an FMA
// that the separate kernels would not compute.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/host_device.h"
#include "core/kernel_context.h"
#include "core/loop_count.h"
#include "ops/functor_id.h"
#include "ops/functors.h"
#include "ops/kernel_types.h"

namespace tide::kernels {

struct ChainOperand {
  enum Kind : uint8_t { reg, mem, scalar };
  const void* ptr = nullptr;  // mem: element 0, on the kernel's device
  uint64_t scalar_bits = 0;   // scalar: the value's bytes
  Kind kind = scalar;
  uint8_t reg_index = 0;
  uint8_t stride = 1;  // mem: 1, or 0 for one element repeated
};

struct ChainStep {
  FunctorId functor = FunctorId::count_;
  int64_t repeat = 1;  // > 1: out = f(out, b) that many times (an in-place register run)
  ChainOperand a, b, out;
  alignas(8) unsigned char functor_bytes[16] = {};
};

inline constexpr int kMaxChainRegisters = 16;

// The kernel entry's arguments: steps[0, num_steps) applied to every element i < n, the
// whole chain `iterations` times per element (a loop body updating its state in place),
// or *count times when count is set (read when the kernel runs; below 0 runs none).
struct FusedChain {
  const ChainStep* steps = nullptr;  // on the kernel's device
  int num_steps = 0;
  int64_t n = 0;
  DType dtype = DType::float32;
  int64_t iterations = 1;
  const void* count = nullptr;
  DType count_dtype = DType::int64;
  // The chain's own kernel (a cudaKernel_t from ops/chain_compiler.h) that the CUDA entry
  // launches instead of the interpreter; null: interpreted. The host entry ignores it.
  const void* compiled = nullptr;
};

namespace chain {

// f(a, b), then `repeat - 1` times r = f(r, b): an in-place register run. The functor is
// chosen once for the run, not per application (the unrolled, fused loop is one step
// repeated thousands of times).
template <class T, class F>
TIDE_HOST_DEVICE T call_repeated(const unsigned char* bytes, T a, T b, int64_t repeat) {
  F f{};
  if constexpr (!std::is_empty_v<F>) memcpy(&f, bytes, sizeof(F));
  // A 16-bit T: each application computes in float and rounds to T, as the unfused op does.
  auto once = [&](T x) -> T {
    if constexpr (std::is_invocable_v<F, compute_t<T>, compute_t<T>>)
      return T(f(widen(x), widen(b)));
    else return T(f(widen(x)));
  };
  T r = once(a);
  for (int64_t k = 1; k < repeat; ++k) r = once(r);
  return r;
}

template <class T>
TIDE_HOST_DEVICE T apply(FunctorId id, const unsigned char* bytes, T a, T b, int64_t repeat = 1) {
  switch (id) {
#define TIDE_CHAIN_CASE(F) \
  case FunctorId::F: return call_repeated<T, fn::F>(bytes, a, b, repeat);
    TIDE_BINARY_FUNCTORS(TIDE_CHAIN_CASE)
    TIDE_MASK_FUNCTORS(TIDE_CHAIN_CASE)
    TIDE_UNARY_FUNCTORS(TIDE_CHAIN_CASE)
#undef TIDE_CHAIN_CASE
    default: return a;  // unreachable: chains are built from listed functors only
  }
}

template <class T>
TIDE_HOST_DEVICE T load(const ChainOperand& o, const T* reg, int64_t i) {
  if (o.kind == ChainOperand::reg) return reg[o.reg_index];
  if (o.kind == ChainOperand::mem) return static_cast<const T*>(o.ptr)[i * o.stride];
  T v;
  memcpy(&v, &o.scalar_bits, sizeof(T));
  return v;
}

// The count of a FusedChain, read where it lives.
TIDE_HOST_DEVICE int64_t iterations_of(const FusedChain& c) {
  return loop_count(c.count, c.count_dtype, c.iterations);
}

// A chain iterated in place (a fused loop body, iterations > 1) writes only its loop's
// state buffers, which no other operand aliases. Their values can stay in registers
// across iterations: loaded once before, stored once after, instead of a store and a load
// per iteration (on a GPU a round trip through L2). The same operations in the same order:
// the same bits. Carried says which memory operands stand for which spare register.
inline constexpr int kMaxCarriedSteps = 8;
struct Carried {  // (no initialisers for the arrays: every kernel thread has one)
  int n = 0;      // state buffers held in registers: ptr and reg are set below n
  const void* ptr[kMaxChainRegisters];
  uint8_t reg[kMaxChainRegisters];
  // Per step: the register standing for its a, b or out memory operand, or -1.
  int8_t a[kMaxCarriedSteps], b[kMaxCarriedSteps], out[kMaxCarriedSteps];
  // One step updating its own state from inputs that do not change (y = f(y, b)): the
  // iterations are one register run of repeat * iterations applications, with the functor
  // chosen once instead of once per iteration (the textbook's fused y = y + 1 loop).
  bool single_run = false;
};

// Plans Carried for an iterated chain: every memory output gets a free register, and every
// read of it must be element-wise (stride 1). False (memory is used as written) for a
// longer chain, one without enough free registers, a broadcast read of a state buffer, or
// a chain that writes no memory.
TIDE_HOST_DEVICE bool plan_carried(const ChainStep* steps, int num_steps, Carried* c) {
  if (num_steps > kMaxCarriedSteps) return false;
  int free_reg = 0;
  for (int s = 0; s < num_steps; ++s) {
    const ChainOperand* ops[3] = {&steps[s].a, &steps[s].b, &steps[s].out};
    for (const ChainOperand* o : ops)
      if (o->kind == ChainOperand::reg && o->reg_index + 1 > free_reg) free_reg = o->reg_index + 1;
  }
  auto find = [&](const void* p) {
    for (int k = 0; k < c->n; ++k)
      if (c->ptr[k] == p) return k;
    return -1;
  };
  c->n = 0;
  for (int s = 0; s < num_steps; ++s) {
    c->a[s] = c->b[s] = c->out[s] = -1;
    const ChainOperand& o = steps[s].out;
    if (o.kind != ChainOperand::mem) continue;
    int k = find(o.ptr);
    if (k < 0) {
      if (free_reg >= kMaxChainRegisters) return false;
      k = c->n++;
      c->ptr[k] = o.ptr;
      c->reg[k] = uint8_t(free_reg++);
    }
    c->out[s] = int8_t(c->reg[k]);
  }
  for (int s = 0; s < num_steps; ++s) {
    const ChainOperand* ops[2] = {&steps[s].a, &steps[s].b};
    int8_t* slots[2] = {&c->a[s], &c->b[s]};
    for (int j = 0; j < 2; ++j) {
      if (ops[j]->kind != ChainOperand::mem) continue;
      const int k = find(ops[j]->ptr);
      if (k < 0) continue;                    // an input the chain never writes
      if (ops[j]->stride != 1) return false;  // every element reads one: keep memory
      *slots[j] = int8_t(c->reg[k]);
    }
  }
  c->single_run = num_steps == 1 && c->out[0] >= 0 && c->a[0] == c->out[0] && c->b[0] < 0;
  return c->n > 0;
}

// What a kernel entry passes to run_chain_element: `storage`, planned, for a chain iterated
// more than once whose state can be carried; else nullptr (memory as written).
TIDE_HOST_DEVICE const Carried* carried_for(const FusedChain& c, int64_t iterations,
                                            Carried* storage) {
  return iterations > 1 && plan_carried(c.steps, c.num_steps, storage) ? storage : nullptr;
}

template <class T>
TIDE_HOST_DEVICE T operand(const ChainOperand& o, int carried, const T* reg, int64_t i) {
  return carried >= 0 ? reg[carried] : load<T>(o, reg, i);
}

}  // namespace chain

// Element i of the chain, `iterations` times. `carried` (plan_carried's, or nullptr) keeps
// the state buffers of an iterated chain in registers.
template <class T>
TIDE_HOST_DEVICE void run_chain_element(const ChainStep* steps, int num_steps, int64_t i,
                                        int64_t iterations,
                                        const chain::Carried* carried = nullptr) {
  T reg[kMaxChainRegisters];
  if (carried) {
    const chain::Carried& c = *carried;
    for (int k = 0; k < c.n; ++k) reg[c.reg[k]] = static_cast<const T*>(c.ptr[k])[i];
    if (c.single_run) {  // the same applications in the same order, the functor chosen once
      const ChainStep& st = steps[0];
      reg[c.out[0]] = chain::apply<T>(st.functor, st.functor_bytes, reg[c.out[0]],
                                      chain::load<T>(st.b, reg, i), st.repeat * iterations);
    } else {
      for (int64_t it = 0; it < iterations; ++it)
        for (int s = 0; s < num_steps; ++s) {
          const ChainStep& st = steps[s];
          const T b = chain::operand<T>(st.b, c.b[s], reg, i);
          const T r = chain::apply<T>(st.functor, st.functor_bytes,
                                      chain::operand<T>(st.a, c.a[s], reg, i), b, st.repeat);
          reg[st.out.kind == ChainOperand::reg ? int(st.out.reg_index) : int(c.out[s])] = r;
        }
    }
    for (int k = 0; k < c.n; ++k) static_cast<T*>(const_cast<void*>(c.ptr[k]))[i] = reg[c.reg[k]];
    return;
  }
  for (int64_t it = 0; it < iterations; ++it)
    for (int s = 0; s < num_steps; ++s) {
      const ChainStep& st = steps[s];
      const T b = chain::load<T>(st.b, reg, i);
      const T r =
          chain::apply<T>(st.functor, st.functor_bytes, chain::load<T>(st.a, reg, i), b, st.repeat);
      if (st.out.kind == ChainOperand::reg) reg[st.out.reg_index] = r;
      else static_cast<T*>(const_cast<void*>(st.out.ptr))[i] = r;
    }
}

namespace cpu {
// Runs the chain on the host (the CPU, or a host-kernel fake GPU's memory), `iterations`
// (or *count) times per element as above.
void fused_chain(const KernelContext& ctx, const FusedChain& c, const NoExtra&);
}  // namespace cpu

}  // namespace tide::kernels
