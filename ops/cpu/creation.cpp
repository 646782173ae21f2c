// CPU implementations of the creation kernel entries (ops/creation_kernels.h).
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

template <class T>
void random_fill(const KernelContext&, const RandomFill<T>& a, const NoExtra&) {
  T* p = a.out.get();
  const int64_t n = a.n;
  const uint64_t offset = a.counter ? a.counter[0] : a.offset;
  const uint64_t key = a.counter ? a.counter[1] : a.key;
  const bool normal = a.normal;
  // One Philox block gives four consecutive elements.
  parallel_for((n + 3) / 4, kParallelGrain / 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      T v[4];
      if (normal) philox::normal4(offset, key, uint64_t(b), v);
      else philox::uniform4(offset, key, uint64_t(b), v);
      for (int64_t l = 0, i = 4 * b; l < 4 && i < n; ++l, ++i) p[i] = v[l];
    }
  });
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
template void random_fill<float>(const KernelContext&, const RandomFill<float>&, const NoExtra&);
template void random_fill<double>(const KernelContext&, const RandomFill<double>&, const NoExtra&);

}  // namespace tide::kernels::cpu
