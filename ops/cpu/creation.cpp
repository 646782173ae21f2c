// CPU implementations of the creation kernel entries (ops/creation_kernels.h).
#include <algorithm>
#include <cstring>

#include "core/philox.h"
#include "core/thread_pool.h"
#include "ops/creation_kernels.h"
#include "ops/functors.h"
#include "ops/op_util.h"

namespace tide::kernels::cpu {

using tide::detail::kParallelGrain;

template <class T>
void fill(const KernelContext&, const Fill<T>& a, const NoExtra&) {
  T* p = a.out.get();
  const Fill<T> f = a;
  parallel_for(a.n, kParallelGrain, [&](int64_t lo, int64_t hi) {
    // convert: the front-ends check the values; saturating keeps a stray one defined.
    if (f.range)
      for (int64_t i = lo; i < hi; ++i) p[i] = fn::convert<T>(f.value + double(i) * f.step);
    else
      for (int64_t i = lo; i < hi; ++i) p[i] = fn::convert<T>(f.value);
  });
}

// Philox blocks [b0, b1) of a random fill: kLanes blocks per step, in lane arrays that the
// compiler vectorises (philox::blocks, then the transform lane by lane). Each element is
// computed by the same functions as philox::normal4/uniform4, so the result does not
// depend on the instruction set chosen below, on the chunking, or on the device.
constexpr int kLanes = 16;

template <class T>
[[gnu::always_inline]] inline void random_blocks(T* p, int64_t n, uint64_t offset, uint64_t key,
                                                 bool normal, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; b += kLanes) {
    uint32_t c[4][kLanes];
    philox::blocks<kLanes>(offset + uint64_t(b), key, c);
    T z[4 * kLanes];
    if (normal) {
      for (int l = 0; l < kLanes; ++l) {
        philox::box_muller(c[0][l], c[1][l], z[4 * l], z[4 * l + 1]);
        philox::box_muller(c[2][l], c[3][l], z[4 * l + 2], z[4 * l + 3]);
      }
    } else {
      for (int l = 0; l < kLanes; ++l)
        for (int j = 0; j < 4; ++j) z[4 * l + j] = philox::uniform_of<T>(c[j][l]);
    }
    const int64_t count = std::min({int64_t(4 * kLanes), 4 * (b1 - b), n - 4 * b});
    std::memcpy(p + 4 * b, z, size_t(count) * sizeof(T));
  }
}

// One copy per instruction set (the library is built for baseline x86-64, whose SSE2 has
// no 32x32->64-bit multiply on more than two lanes), chosen on first use by asking the CPU.
// Not GCC's target_clones: its ifunc resolver runs while the library is relocated, before
// ThreadSanitizer's runtime is up, and an instrumented build then crashes at load.
template <class T>
using RandomBlocksFn = void (*)(T*, int64_t, uint64_t, uint64_t, bool, int64_t, int64_t);

template <class T>
void random_blocks_default(T* p, int64_t n, uint64_t offset, uint64_t key, bool normal, int64_t b0,
                           int64_t b1) {
  random_blocks(p, n, offset, key, normal, b0, b1);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TIDE_RANDOM_ISA_COPIES 1
template <class T>
__attribute__((target("avx2"))) void random_blocks_avx2(T* p, int64_t n, uint64_t offset,
                                                        uint64_t key, bool normal, int64_t b0,
                                                        int64_t b1) {
  random_blocks(p, n, offset, key, normal, b0, b1);
}
template <class T>
__attribute__((target("avx512f"))) void random_blocks_avx512(T* p, int64_t n, uint64_t offset,
                                                             uint64_t key, bool normal, int64_t b0,
                                                             int64_t b1) {
  random_blocks(p, n, offset, key, normal, b0, b1);
}
#endif

template <class T>
RandomBlocksFn<T> random_blocks_for_this_cpu() {
  static const RandomBlocksFn<T> fn = []() -> RandomBlocksFn<T> {
#ifdef TIDE_RANDOM_ISA_COPIES
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &random_blocks_avx512<T>;
    if (__builtin_cpu_supports("avx2")) return &random_blocks_avx2<T>;
#endif
    return &random_blocks_default<T>;
  }();
  return fn;
}

template <class T>
void random_fill(const KernelContext&, const RandomFill<T>& a, const NoExtra&) {
  T* p = a.out.get();
  const int64_t n = a.n;
  const uint64_t offset = a.counter ? a.counter[0] : a.offset;
  const uint64_t key = a.counter ? a.counter[1] : a.key;
  const bool normal = a.normal;
  // One Philox block gives four consecutive elements.
  const RandomBlocksFn<T> blocks = random_blocks_for_this_cpu<T>();
  parallel_for((n + 3) / 4, kParallelGrain / 16,
               [&](int64_t b0, int64_t b1) { blocks(p, n, offset, key, normal, b0, b1); });
}

void copy_bytes(const KernelContext&, const CopyBytes& a, const NoExtra&) {
  unsigned char* d = a.dst.get();
  const unsigned char* s = a.src.get();
  parallel_for(int64_t(a.bytes), kParallelGrain * 4,
               [&](int64_t lo, int64_t hi) { std::memcpy(d + lo, s + lo, size_t(hi - lo)); });
}

#define TIDE_FILL(T) template void fill<T>(const KernelContext&, const Fill<T>&, const NoExtra&);
TIDE_FILL(float)
TIDE_FILL(double)
TIDE_FILL(int32_t)
TIDE_FILL(int64_t)
TIDE_FILL(bfloat16)
TIDE_FILL(float16)
template void random_fill<float>(const KernelContext&, const RandomFill<float>&, const NoExtra&);
template void random_fill<double>(const KernelContext&, const RandomFill<double>&, const NoExtra&);

}  // namespace tide::kernels::cpu
