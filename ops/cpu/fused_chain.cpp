// The CPU entry of a fused chain (ops/fused_chain.h), for the CPU and for a host-kernel
// fake GPU. The chain runs block by block: each step is one call of its functor's loop
// over kBlock elements (values inside the chain stay in per-block registers), so every
// step vectorises as the unfused op does. The CUDA kernel's per-element interpreter
// (run_chain_element) gives the same bits, but a call per element and step is several
// times slower on a CPU. A chain whose result depends on the order of its elements (a
// step reads one element of memory the chain writes) runs element by element instead.
#include "ops/fused_chain.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <type_traits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/elementwise_loops.h"

namespace tide::kernels::cpu {

namespace {

constexpr int64_t kBlock = 256;           // elements per register
constexpr size_t kMaxIteratedSteps = 32;  // iterated chains up to this many steps keep
                                          // their operand pointers per block
constexpr size_t kStackSteps = 32;        // plans of longer chains are allocated

// o[i] = f(a[i*sa], b[i*sb]) (unary: f(a[i*sa])) for i < n; `functor` points at F.
using BlockFn = void (*)(const void* functor, const void* a, int64_t sa, const void* b, int64_t sb,
                         void* o, int64_t n);
// o[i] = f(o[i], b[i*sb]) (unary: f(o[i])) `iterations` times, each element's chain in
// registers: the same functor in the same order, so the same bits as separate steps.
using IterateFn = void (*)(const void* functor, const void* b, int64_t sb, void* o, int64_t n,
                           int64_t iterations);

template <class T, class F>
void binary_block(const void* f, const void* a, int64_t sa, const void* b, int64_t sb, void* o,
                  int64_t n) {
  tide::detail::binary_row(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb,
                           static_cast<T*>(o), n, *static_cast<const F*>(f));
}

template <class T, class F>
void unary_block(const void* f, const void* a, int64_t sa, const void*, int64_t, void* o,
                 int64_t n) {
  const T* pa = static_cast<const T*>(a);
  T* po = static_cast<T*>(o);
  const F& fn = *static_cast<const F*>(f);
  if (sa == 1)
    for (int64_t i = 0; i < n; ++i) po[i] = T(fn(widen(pa[i])));
  else
    for (int64_t i = 0; i < n; ++i) po[i] = T(fn(widen(*pa)));
}

template <class T, class F, int kArity>
void iterate(const void* f, const void* b, int64_t sb, void* o, int64_t n, int64_t iterations) {
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
        if constexpr (kArity == 2) x[j] = T(fn(widen(x[j]), widen(y[j])));
        else x[j] = T(fn(widen(x[j])));
      }
    for (int64_t j = 0; j < len; ++j) po[i0 + j] = x[j];
  }
}

struct StepFns {
  BlockFn block;
  IterateFn iterate;
};

template <class T, class F>
constexpr StepFns fns_of() {
  if constexpr (std::is_invocable_v<F, compute_t<T>, compute_t<T>>)
    return {&binary_block<T, F>, &iterate<T, F, 2>};
  else return {&unary_block<T, F>, &iterate<T, F, 1>};
}

// Per dtype, the loops of every functor, indexed by FunctorId (the lists' order).
template <class T>
constexpr StepFns kFns[] = {
#define TIDE_STEP_FNS(F) fns_of<T, fn::F>(),
    TIDE_BINARY_FUNCTORS(TIDE_STEP_FNS) TIDE_MASK_FUNCTORS(TIDE_STEP_FNS)
        TIDE_UNARY_FUNCTORS(TIDE_STEP_FNS)
#undef TIDE_STEP_FNS
};
static_assert(std::size(kFns<float>) == size_t(FunctorId::count_), "one entry per functor");

// One step as the block loop walks it (a long chain must stay in cache). No initialisers:
// a run's plan is filled step by step, not cleared first.
struct Hot {
  BlockFn block;
  IterateFn iterate;
  int64_t repeat;          // > 1: out = f(out, b) repeat - 1 more times (iterate)
  bool a_is_out;           // a run in place: iterate does all repeat applications
  const void* functor;     // the step's functor bytes
  unsigned char* base[3];  // a, b, out: mem, or the scalar's bytes; unused for reg
  uint32_t reg_offset[3];
  int8_t stride[3];   // passed to the block function
  int8_t advance[3];  // elements to move per element of the block start
  bool is_reg[3];
};

Hot hot_of(const ChainStep& st, const StepFns* fns, size_t esize) {
  TIDE_ASSERT(st.functor < FunctorId::count_, "a fused chain step without a functor");
  Hot h{};
  h.block = fns[size_t(st.functor)].block;
  h.iterate = fns[size_t(st.functor)].iterate;
  h.repeat = st.repeat;
  h.functor = st.functor_bytes;
  const ChainOperand* ops[3] = {&st.a, &st.b, &st.out};
  for (int k = 0; k < 3; ++k) {
    const ChainOperand& o = *ops[k];
    h.is_reg[k] = o.kind == ChainOperand::reg;
    if (o.kind == ChainOperand::reg) {
      h.stride[k] = 1;
      h.reg_offset[k] = uint32_t(size_t(o.reg_index) * size_t(kBlock) * esize);
    } else if (o.kind == ChainOperand::scalar) {
      h.base[k] = reinterpret_cast<unsigned char*>(const_cast<uint64_t*>(&o.scalar_bits));
    } else {
      h.stride[k] = h.advance[k] = int8_t(o.stride);
      h.base[k] = static_cast<unsigned char*>(const_cast<void*>(o.ptr));
    }
  }
  h.a_is_out = h.is_reg[0] && h.is_reg[2] && h.reg_offset[0] == h.reg_offset[2];
  return h;
}

// Whether a step reads, as one element for all (stride 0), memory the chain writes: then
// the result depends on the order of the elements, and the chain runs element by element,
// in the order the interpreter defines.
bool reads_a_written_element(const FusedChain& c, size_t esize) {
  for (int s = 0; s < c.num_steps; ++s)
    for (const ChainOperand* o : {&c.steps[s].a, &c.steps[s].b}) {
      if (o->kind != ChainOperand::mem || o->stride != 0) continue;
      const auto* p = static_cast<const unsigned char*>(o->ptr);
      for (int w = 0; w < c.num_steps; ++w) {
        const ChainOperand& out = c.steps[w].out;
        const auto* begin = static_cast<const unsigned char*>(out.ptr);
        if (out.kind == ChainOperand::mem && p >= begin && p < begin + size_t(c.n) * esize)
          return true;
      }
    }
  return false;
}

void run_elements(const FusedChain& c, int64_t iterations) {
  chain::Carried storage;
  const chain::Carried* carried = chain::carried_for(c, iterations, &storage);
  dispatch_with_half(c.dtype, [&](auto z) {
    using T = decltype(z);
    for (int64_t i = 0; i < c.n; ++i)
      run_chain_element<T>(c.steps, c.num_steps, i, iterations, carried);
  });
}

void run_blocks(const Hot* hot, size_t num_hot, int64_t n, size_t esize, int64_t iterations) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, tide::detail::kParallelGrain / kBlock);
  // A loop body of one op on its state (y = f(y, b), b not the state): its iterate
  // function runs all iterations of a block in registers.
  bool one_op_in_place = false;
  if (num_hot == 1 && hot[0].repeat == 1) {
    const Hot& h = hot[0];
    const unsigned char *state = h.base[0], *end = state + size_t(n) * esize;
    const bool b_is_state = !h.is_reg[1] && h.base[1] >= state && h.base[1] < end;
    one_op_in_place = !h.is_reg[0] && !h.is_reg[2] && state == h.base[2] && h.advance[0] == 1 &&
                      h.advance[2] == 1 && !b_is_state;
  }
  // One Hot over a block: a single step, or a re-rolled run of identical in-place steps.
  auto apply = [](const Hot& h, unsigned char* const* p, int64_t len) {
    if (h.repeat > 1 && h.a_is_out) {
      h.iterate(h.functor, p[1], h.stride[1], p[2], len, h.repeat);
      return;
    }
    h.block(h.functor, p[0], h.stride[0], p[1], h.stride[1], p[2], len);
    if (h.repeat > 1) h.iterate(h.functor, p[1], h.stride[1], p[2], len, h.repeat - 1);
  };
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    alignas(64) unsigned char regs[kMaxChainRegisters * kBlock * 8];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
      if (iterations > 1 && one_op_in_place) {
        const Hot& h = hot[0];
        h.iterate(h.functor, h.base[1] + size_t(i0 * h.advance[1]) * esize, h.stride[1],
                  h.base[2] + size_t(i0) * esize, len, iterations);
        continue;
      }
      if (iterations > 1 && num_hot <= kMaxIteratedSteps) {
        // A loop body: the operands of a block do not change between iterations.
        unsigned char* ptr[kMaxIteratedSteps][3];
        for (size_t j = 0; j < num_hot; ++j)
          for (int k = 0; k < 3; ++k)
            ptr[j][k] = hot[j].is_reg[k] ? regs + hot[j].reg_offset[k]
                                         : hot[j].base[k] + size_t(i0 * hot[j].advance[k]) * esize;
        for (int64_t it = 0; it < iterations; ++it)
          for (size_t j = 0; j < num_hot; ++j) apply(hot[j], ptr[j], len);
        continue;
      }
      for (int64_t it = 0; it < iterations; ++it)
        for (size_t j = 0; j < num_hot; ++j) {
          const Hot& h = hot[j];
          unsigned char* p[3];
          for (int k = 0; k < 3; ++k)
            p[k] = h.is_reg[k] ? regs + h.reg_offset[k]
                               : h.base[k] + size_t(i0 * h.advance[k]) * esize;
          apply(h, p, len);
        }
    }
  });
}

}  // namespace

void fused_chain(const KernelContext&, const FusedChain& c, const NoExtra&) {
  const int64_t iterations = chain::iterations_of(c);
  if (iterations <= 0 || c.n <= 0 || c.num_steps <= 0) return;
  const StepFns* fns = nullptr;
  dispatch_with_half(c.dtype, [&](auto z) { fns = kFns<decltype(z)>; });
  const size_t esize = size_of(c.dtype), num = size_t(c.num_steps);
  if (reads_a_written_element(c, esize)) {
    run_elements(c, iterations);
    return;
  }
  Hot on_stack[kStackSteps];
  std::unique_ptr<Hot[]> on_heap;
  Hot* hot = on_stack;
  if (num > kStackSteps) {
    on_heap = std::make_unique<Hot[]>(num);
    hot = on_heap.get();
  }
  for (size_t j = 0; j < num; ++j) hot[j] = hot_of(c.steps[j], fns, esize);
  run_blocks(hot, num, c.n, esize, iterations);
}

}  // namespace tide::kernels::cpu
