// isa_parallel_for: parallel_for with the body compiled for the widest vector ISA this CPU
// has. Used by the attention and layer norm kernels and GELU's loops (ops/cpu/attention.cpp,
// norm.cpp, elementwise.cpp). Not a public header. (Tried on every contiguous elementwise
// loop too: the GPT step got slower, 41 -> 53 ms, so the other functors stay on the
// baseline.)
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace tide::detail {

// The body runs compiled for AVX-512, AVX2 or else the build's baseline (SSE2 on x86-64):
// loops over contiguous floats run 16 or 8 wide instead of 4, with no reassociation. The
// AVX-512 copy may fuse a multiply and an add into one of AVX-512F's FMAs (GCC contracts by
// default): its bits then differ from the baseline's, the same on every run of one
// machine. A file whose results must equal another kernel's bit for bit (the eager GELU and
// the traced fused chain) compiles with -ffp-contract=off (ops/CMakeLists.txt). The body
// and its helpers must inline into the target lambdas: mark them always_inline. Not GCC's
// target_clones, whose ifunc resolvers run before the sanitizers' runtimes are ready.
#if defined(__x86_64__) && defined(__GNUC__)
// 2: AVX-512F, 1: AVX2, 0: the baseline.
inline int widest_isa() {
  static const int isa = __builtin_cpu_supports("avx512f") ? 2
                         : __builtin_cpu_supports("avx2")  ? 1
                                                           : 0;
  return isa;
}
#endif

template <class F>
void isa_parallel_for(int64_t n, int64_t grain, F&& body) {
#if defined(__x86_64__) && defined(__GNUC__)
  const int isa = widest_isa();
  if (isa == 2)
    parallel_for(
        n, grain, [&](int64_t a, int64_t b) __attribute__((target("avx512f"))) { body(a, b); });
  else if (isa == 1)
    parallel_for(
        n, grain, [&](int64_t a, int64_t b) __attribute__((target("avx2"))) { body(a, b); });
  else parallel_for(n, grain, body);
#else
  parallel_for(n, grain, body);
#endif
}

// body() on the calling thread, compiled as isa_parallel_for's bodies are.
template <class F>
void isa_run(F&& body) {
#if defined(__x86_64__) && defined(__GNUC__)
  const int isa = widest_isa();
  if (isa == 2) [&]() __attribute__((target("avx512f"))) {
      body();
    }
  ();
  else if (isa == 1)[&]() __attribute__((target("avx2"))) {
    body();
  }
  ();
  else body();
#else
  body();
#endif
}

}  // namespace tide::detail
