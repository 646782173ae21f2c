// CUDA launchers of the elementwise entries (ops/elementwise_kernels.h): one kernel
// template per entry over the functors of ops/functors.h, registered for every functor
// of its lists and every dtype (a 16-bit one loaded as float, computed in float, stored back). The
// dense paths load and store 16 bytes per access when the pointers allow it (contiguous tensors
// from tide's allocator always do, but views with an offset may not).
#include "core/cuda/await_grids.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"
#include "ops/elementwise_kernels.h"
#include "ops/functors.h"

namespace tide::kernels::cuda {

namespace {

template <class T>
constexpr int vec_of() {
  return 16 / int(sizeof(T)) > 0 ? 16 / int(sizeof(T)) : 1;
}

template <class T, int N>
struct alignas(16) Pack {
  T v[N];
};

template <class... P>
bool aligned16(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// ---- kernels --------------------------------------------------------------------------

// Dense a and b, vectorised: out[i] = f(a[i], b[i]) for i < n (n a multiple of the packs
// handled here; the tail by the scalar kernel).
template <class O, class T, class F, int N>
__global__ void binary_dense_vec(const T* a, const T* b, O* out, int64_t packs, F f) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t p = global_index(); p < packs; p += grid_stride()) {
    Pack<T, N> x = reinterpret_cast<const Pack<T, N>*>(a)[p];
    Pack<T, N> y = reinterpret_cast<const Pack<T, N>*>(b)[p];
    O r[N];
#pragma unroll
    for (int j = 0; j < N; ++j) r[j] = O(f(widen(x.v[j]), widen(y.v[j])));
#pragma unroll
    for (int j = 0; j < N; ++j) out[p * N + j] = r[j];
  }
}

template <class O, class T, class F>
__global__ void binary_strided(const T* a, int64_t sa, const T* b, int64_t sb, O* out,
                               int64_t begin, int64_t n, F f) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = begin + global_index(); i < n; i += grid_stride())
    out[i] = O(f(widen(a[i * sa]), widen(b[i * sb])));
}

template <class O, class T, class F>
__global__ void binary_bcast(const T* a, const T* b, O* out, BroadcastGeometry g, int64_t n, F f) {
  tide::cuda::await_prerequisite_grids();
  int64_t sa[kMaxDims], sb[kMaxDims];
  g.strides(g.bcast_a, sa);
  g.strides(g.bcast_b, sb);
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      int64_t idx = rem % g.out[d];
      rem /= g.out[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    out[i] = O(f(widen(a[oa]), widen(b[ob])));
  }
}

template <class O, class T, class F, bool kScalarFirst>
__global__ void scalar_kernel(const T* a, compute_t<T> s, O* out, int64_t n, F f) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < n; i += grid_stride())
    out[i] = kScalarFirst ? O(f(s, widen(a[i]))) : O(f(widen(a[i]), s));
}

template <class T, class F, int N>
__global__ void unary_dense_vec(const T* a, T* out, int64_t packs, F f) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t p = global_index(); p < packs; p += grid_stride()) {
    Pack<T, N> x = reinterpret_cast<const Pack<T, N>*>(a)[p];
    Pack<T, N> r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = T(f(widen(x.v[j])));
    reinterpret_cast<Pack<T, N>*>(out)[p] = r;
  }
}

template <class T, class F>
__global__ void unary_scalar(const T* a, T* out, int64_t begin, int64_t n, F f) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = begin + global_index(); i < n; i += grid_stride()) out[i] = T(f(widen(a[i])));
}

template <class O, class T>
__global__ void convert_kernel(const T* a, O* out, int64_t n) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < n; i += grid_stride()) out[i] = fn::convert<O>(a[i]);
}

// ---- entries --------------------------------------------------------------------------

template <class O, class T, class F>
void binary_flat(const KernelContext& ctx, const BinaryFlat<O, T>& x, const F& f) {
  if (x.n == 0) return;
  const T* a = x.a.get();
  const T* b = x.b.get();
  O* out = x.out.get();
  constexpr int N = vec_of<T>();
  int64_t begin = 0;
  if (x.sa == 1 && x.sb == 1 && aligned16(a, b, out) && x.n >= N) {
    int64_t packs = x.n / N;
    binary_dense_vec<O, T, F, N>
        <<<blocks_for(packs), kThreads, 0, stream_of(ctx)>>>(a, b, out, packs, f);
    begin = packs * N;
    if (begin == x.n) return;
  }
  binary_strided<O, T, F><<<blocks_for(x.n - begin), kThreads, 0, stream_of(ctx)>>>(
      a, x.sa, b, x.sb, out, begin, x.n, f);
}

template <class O, class T, class F>
void binary_broadcast(const KernelContext& ctx, const BinaryBroadcast<O, T>& x, const F& f) {
  int64_t n = x.g.numel();
  if (n == 0) return;
  binary_bcast<O, T, F><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(x.a.get(), x.b.get(),
                                                                        x.out.get(), x.g, n, f);
}

template <class O, class T, class F>
void scalar_flat(const KernelContext& ctx, const ScalarFlat<O, T>& x, const F& f) {
  if (x.n == 0) return;
  if (x.scalar_first)
    scalar_kernel<O, T, F, true>
        <<<blocks_for(x.n), kThreads, 0, stream_of(ctx)>>>(x.a.get(), x.s, x.out.get(), x.n, f);
  else
    scalar_kernel<O, T, F, false>
        <<<blocks_for(x.n), kThreads, 0, stream_of(ctx)>>>(x.a.get(), x.s, x.out.get(), x.n, f);
}

template <class T, class F>
void unary_flat(const KernelContext& ctx, const UnaryFlat<T>& x, const F& f) {
  if (x.n == 0) return;
  const T* a = x.a.get();
  T* out = x.out.get();
  constexpr int N = vec_of<T>();
  int64_t begin = 0;
  if (aligned16(a, out) && x.n >= N) {
    int64_t packs = x.n / N;
    unary_dense_vec<T, F, N><<<blocks_for(packs), kThreads, 0, stream_of(ctx)>>>(a, out, packs, f);
    begin = packs * N;
    if (begin == x.n) return;
  }
  unary_scalar<T, F>
      <<<blocks_for(x.n - begin), kThreads, 0, stream_of(ctx)>>>(a, out, begin, x.n, f);
}

template <class O, class T>
void convert(const KernelContext& ctx, const Convert<O, T>& x, const NoExtra&) {
  if (x.n == 0) return;
  convert_kernel<O, T>
      <<<blocks_for(x.n), kThreads, 0, stream_of(ctx)>>>(x.a.get(), x.out.get(), x.n);
}

// ---- registration ---------------------------------------------------------------------

template <class F, class T>
void register_binary_for() {
  using O = fn::binary_out_t<F, T>;
  CudaKernel<BinaryFlat<O, T>, F>::fn = &binary_flat<O, T, F>;
  CudaKernel<BinaryBroadcast<O, T>, F>::fn = &binary_broadcast<O, T, F>;
  CudaKernel<ScalarFlat<O, T>, F>::fn = &scalar_flat<O, T, F>;
}
template <class F>
void register_binary() {
  register_binary_for<F, float>();
  register_binary_for<F, double>();
  register_binary_for<F, int32_t>();
  register_binary_for<F, int64_t>();
  register_binary_for<F, bfloat16>();
  register_binary_for<F, float16>();
}
template <class F>
void register_unary() {
  CudaKernel<UnaryFlat<float>, F>::fn = &unary_flat<float, F>;
  CudaKernel<UnaryFlat<double>, F>::fn = &unary_flat<double, F>;
  CudaKernel<UnaryFlat<int32_t>, F>::fn = &unary_flat<int32_t, F>;
  CudaKernel<UnaryFlat<int64_t>, F>::fn = &unary_flat<int64_t, F>;
  CudaKernel<UnaryFlat<bfloat16>, F>::fn = &unary_flat<bfloat16, F>;
  CudaKernel<UnaryFlat<float16>, F>::fn = &unary_flat<float16, F>;
}
template <class T>
void register_convert_from() {
  CudaKernel<Convert<float, T>, NoExtra>::fn = &convert<float, T>;
  CudaKernel<Convert<double, T>, NoExtra>::fn = &convert<double, T>;
  CudaKernel<Convert<int32_t, T>, NoExtra>::fn = &convert<int32_t, T>;
  CudaKernel<Convert<int64_t, T>, NoExtra>::fn = &convert<int64_t, T>;
  CudaKernel<Convert<bfloat16, T>, NoExtra>::fn = &convert<bfloat16, T>;
  CudaKernel<Convert<float16, T>, NoExtra>::fn = &convert<float16, T>;
}

}  // namespace

void register_elementwise(OpList& ops) {
#define TIDE_REGISTER_BINARY(F) register_binary<fn::F>();
  TIDE_BINARY_FUNCTORS(TIDE_REGISTER_BINARY)
  TIDE_MASK_FUNCTORS(TIDE_REGISTER_BINARY)
#undef TIDE_REGISTER_BINARY
#define TIDE_REGISTER_UNARY(F) register_unary<fn::F>();
  TIDE_UNARY_FUNCTORS(TIDE_REGISTER_UNARY)
#undef TIDE_REGISTER_UNARY
  register_convert_from<float>();
  register_convert_from<double>();
  register_convert_from<int32_t>();
  register_convert_from<int64_t>();
  register_convert_from<bfloat16>();
  register_convert_from<float16>();
  // Every listed functor and every conversion is registered above: the ops whose rows name
  // one have their kernels (the op table's functor column).
  for (const OpTraits& t : all_ops())
    if (has_elementwise_kernels(t.id)) ops[size_t(t.id)] = true;
}

}  // namespace tide::kernels::cuda
