// CUDA launchers of the attention entries (ops/attention_kernels.h). Forward: one block per
// (batch*head, tile of b queries), one thread per query row; the block stages each tile of
// b keys and values in shared memory and every thread runs the online softmax of its row
// (running max and denominator, its accumulator rescaled when the max grows), so no T x S
// scores exist anywhere. Gradient: one thread per row for delta = rowsum(dout * out); dk
// and dv with one block per (batch*head, key tile) that walks every query tile in order;
// dq with one block per (batch*head, query tile) that walks the key tiles in order. Each
// output element is summed by one thread in a fixed order: no atomics, the same bits on
// every run. Rows are found through HeadRows (ops/attention_kernels.h), so q, k, v and their
// gradients may be the parts of a fused projection's rows. Per-thread rows live in shared memory
// transposed ([column][thread]), so a warp's accesses fall in different banks; a staged tile is
// read by all threads at one address (a broadcast). The tile edge b is the largest power of two up
// to 64 whose buffers fit 48 KiB, so D is bounded (kAttentionCudaMaxD4/8, checked by the
// front-end). A straightforward kernel, not a tuned one: no tensor cores, no warp-level matrix
// products. bfloat16 and float16 load widened into float tiles and store each output
// rounded once (lse and the statistics float32). Compiled in CI; written without a GPU to
// run it on (tide_cuda_tests runs the attention cases of tests/ops on one).
#include <cstdint>

#include "core/cuda/await_grids.h"
#include "ops/attention_kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/registry.h"

namespace tide::kernels::cuda {

namespace {

constexpr int kMaxTile = 64;
constexpr int64_t kSharedBytes = 48 * 1024;

__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ double dexp(double x) { return exp(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ double dlog(double x) { return log(x); }

// The tile edge for buffers of `per_b(b)` elements of `elem` bytes.
template <class F>
int tile_for(int64_t elem, F per_b) {
  int b = kMaxTile;
  while (b > 1 && per_b(int64_t(b)) * elem > kSharedBytes) b /= 2;
  return b;
}

int64_t tiles(int64_t n, int b) { return (n + b - 1) / b; }

// S: the stored type; T: the computing one (float for the 16-bit types, which load
// widened and store rounded once).
template <class S, class T = compute_t<S>>
struct Fwd {
  const S *q, *k, *v;
  S* out;
  T* lse;
  int64_t t, s, d, tiles;
  bool causal;
  T scale;
  HeadRows in, rows;
};

// Element x of a tile of nc rows, d wide and rs apart, starting at row j0.
__device__ __forceinline__ int64_t tile_at(int64_t j0, int64_t x, int64_t d, int64_t rs) {
  return (j0 + x / d) * rs + x % d;
}

// Shared: k and v tiles [b][d], q and acc per thread [d][b], scores per thread [b][b].
template <class S, class T = compute_t<S>>
__global__ void attention_fwd(Fwd<S> a, int b) {
  tide::cuda::await_prerequisite_grids();
  extern __shared__ double smem[];
  const int64_t d = a.d;
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + b * d;
  T* qs = vs + b * d;
  T* acc = qs + b * d;
  T* sc = acc + b * d;
  const int tid = int(threadIdx.x);
  const int64_t bh = int64_t(blockIdx.x) / a.tiles, i0 = (int64_t(blockIdx.x) % a.tiles) * b;
  const int64_t i = i0 + tid;
  const bool live = i < a.t;
  const int64_t rs = a.in.stride(d);
  const S* Q = a.q + a.in.at(bh, a.t, d, 0);
  const S* K = a.k + a.in.at(bh, a.s, d, 0);
  const S* V = a.v + a.in.at(bh, a.s, d, 0);
  for (int64_t c = 0; c < d; ++c) {
    qs[c * b + tid] = live ? T(widen(Q[i * rs + c])) : T(0);
    acc[c * b + tid] = T(0);
  }
  T m = T(-INFINITY), l = T(0);
  // Under the causal mask no query of this tile sees a key past its last row (T == S).
  const int64_t j_end = a.causal ? (a.s < i0 + b ? a.s : i0 + b) : a.s;
  for (int64_t j0 = 0; j0 < j_end; j0 += b) {
    const int64_t nc = j_end - j0 < b ? j_end - j0 : b;
    __syncthreads();  // every thread is done with the previous tile
    for (int64_t x = tid; x < nc * d; x += b) {
      ks[x] = T(widen(K[tile_at(j0, x, d, rs)]));
      vs[x] = T(widen(V[tile_at(j0, x, d, rs)]));
    }
    __syncthreads();
    if (!live) continue;
    T mx = T(-INFINITY);
    for (int64_t j = 0; j < nc; ++j) {
      T dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += qs[c * b + tid] * ks[j * d + c];
      const T sj = a.causal && j0 + j > i ? T(-INFINITY) : dot * a.scale;
      sc[j * b + tid] = sj;
      mx = sj > mx ? sj : mx;
    }
    // The first tile holds key 0, which every query sees: m is finite from then on.
    const T m_new = mx > m ? mx : m, corr = dexp(m - m_new);
    T sum = 0;
    for (int64_t j = 0; j < nc; ++j) {
      const T p = dexp(sc[j * b + tid] - m_new);
      sc[j * b + tid] = p;
      sum += p;
    }
    l = l * corr + sum;
    m = m_new;
    for (int64_t c = 0; c < d; ++c) {
      T o = acc[c * b + tid] * corr;
      for (int64_t j = 0; j < nc; ++j) o += sc[j * b + tid] * vs[j * d + c];
      acc[c * b + tid] = o;
    }
  }
  if (!live) return;
  const T inv = T(1) / l;
  S* y = a.out + a.rows.at(bh, a.t, d, i);
  for (int64_t c = 0; c < d; ++c) y[c] = half_convert<S>(acc[c * b + tid] * inv);
  a.lse[bh * a.t + i] = m + dlog(l);
}

template <class S, class T = compute_t<S>>
struct Prep {
  const S *dout, *out;
  const T* lse;
  T* stats;
  int64_t rows, d, t;
  HeadRows layout;
};

// stats[r] = lse[r], stats[rows + r] = dout[r] . out[r] (in double).
template <class S, class T = compute_t<S>>
__global__ void attention_grad_prep_rows(Prep<S> a) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t r = global_index(); r < a.rows; r += grid_stride()) {
    const int64_t at = a.layout.at(r / a.t, a.t, a.d, r % a.t);
    const S* g = a.dout + at;
    const S* o = a.out + at;
    double sum = 0;
    for (int64_t c = 0; c < a.d; ++c) sum += double(widen(g[c])) * double(widen(o[c]));
    a.stats[r] = a.lse[r];
    a.stats[a.rows + r] = T(sum);
  }
}

template <class S, class T = compute_t<S>>
struct Bwd {
  const S *dout, *q, *k, *v;
  const T *lse, *delta;
  S *dq, *dk, *dv;
  int64_t t, s, d, tiles;
  bool causal;
  T scale;
  HeadRows in, rows;
};

// dk and dv of key row j = j0 + thread. Shared: k, v, dk, dv per thread [d][b]; q and
// dout tiles [b][d]; the tile's lse and delta [b] each.
template <class S, class T = compute_t<S>>
__global__ void attention_bwd_kv(Bwd<S> a, int b) {
  tide::cuda::await_prerequisite_grids();
  extern __shared__ double smem[];
  const int64_t d = a.d;
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + b * d;
  T* dks = vs + b * d;
  T* dvs = dks + b * d;
  T* qs = dvs + b * d;
  T* gs = qs + b * d;
  T* ls = gs + b * d;
  T* ds = ls + b;
  const int tid = int(threadIdx.x);
  const int64_t bh = int64_t(blockIdx.x) / a.tiles, j0 = (int64_t(blockIdx.x) % a.tiles) * b;
  const int64_t j = j0 + tid;
  const bool live = j < a.s;
  const int64_t rs = a.in.stride(d), rg = a.rows.stride(d);
  const S* K = a.k + a.in.at(bh, a.s, d, 0);
  const S* V = a.v + a.in.at(bh, a.s, d, 0);
  const S* Q = a.q + a.in.at(bh, a.t, d, 0);
  const S* G = a.dout + a.rows.at(bh, a.t, d, 0);
  for (int64_t c = 0; c < d; ++c) {
    ks[c * b + tid] = live ? T(widen(K[j * rs + c])) : T(0);
    vs[c * b + tid] = live ? T(widen(V[j * rs + c])) : T(0);
    dks[c * b + tid] = T(0);
    dvs[c * b + tid] = T(0);
  }
  // Under the causal mask queries before j0 see none of these keys.
  for (int64_t i0 = a.causal ? j0 : 0; i0 < a.t; i0 += b) {
    const int64_t nr = a.t - i0 < b ? a.t - i0 : b;
    __syncthreads();
    for (int64_t x = tid; x < nr * d; x += b) {
      qs[x] = T(widen(Q[tile_at(i0, x, d, rs)]));
      gs[x] = T(widen(G[tile_at(i0, x, d, rg)]));
    }
    for (int64_t x = tid; x < nr; x += b) {
      ls[x] = a.lse[bh * a.t + i0 + x];
      ds[x] = a.delta[bh * a.t + i0 + x];
    }
    __syncthreads();
    if (!live) continue;
    for (int64_t r = 0; r < nr; ++r) {
      if (a.causal && j > i0 + r) continue;
      T qk = 0, gv = 0;
      for (int64_t c = 0; c < d; ++c) {
        qk += qs[r * d + c] * ks[c * b + tid];
        gv += gs[r * d + c] * vs[c * b + tid];
      }
      const T p = dexp(qk * a.scale - ls[r]), dsc = a.scale * p * (gv - ds[r]);
      for (int64_t c = 0; c < d; ++c) {
        dvs[c * b + tid] += p * gs[r * d + c];
        dks[c * b + tid] += dsc * qs[r * d + c];
      }
    }
  }
  if (!live) return;
  const int64_t out_j = a.in.at(bh, a.s, d, j);
  for (int64_t c = 0; c < d; ++c) {
    a.dk[out_j + c] = half_convert<S>(dks[c * b + tid]);
    a.dv[out_j + c] = half_convert<S>(dvs[c * b + tid]);
  }
}

// dq of query row i = i0 + thread. Shared: q, dout, dq per thread [d][b]; k and v tiles
// [b][d].
template <class S, class T = compute_t<S>>
__global__ void attention_bwd_q(Bwd<S> a, int b) {
  tide::cuda::await_prerequisite_grids();
  extern __shared__ double smem[];
  const int64_t d = a.d;
  T* qs = reinterpret_cast<T*>(smem);
  T* gs = qs + b * d;
  T* dqs = gs + b * d;
  T* ks = dqs + b * d;
  T* vs = ks + b * d;
  const int tid = int(threadIdx.x);
  const int64_t bh = int64_t(blockIdx.x) / a.tiles, i0 = (int64_t(blockIdx.x) % a.tiles) * b;
  const int64_t i = i0 + tid;
  const bool live = i < a.t;
  const int64_t rs = a.in.stride(d), rg = a.rows.stride(d);
  const S* Q = a.q + a.in.at(bh, a.t, d, 0);
  const S* G = a.dout + a.rows.at(bh, a.t, d, 0);
  const S* K = a.k + a.in.at(bh, a.s, d, 0);
  const S* V = a.v + a.in.at(bh, a.s, d, 0);
  for (int64_t c = 0; c < d; ++c) {
    qs[c * b + tid] = live ? T(widen(Q[i * rs + c])) : T(0);
    gs[c * b + tid] = live ? T(widen(G[i * rg + c])) : T(0);
    dqs[c * b + tid] = T(0);
  }
  const T lse_i = live ? a.lse[bh * a.t + i] : T(0), delta_i = live ? a.delta[bh * a.t + i] : T(0);
  const int64_t j_end = a.causal ? (a.s < i0 + b ? a.s : i0 + b) : a.s;
  for (int64_t j0 = 0; j0 < j_end; j0 += b) {
    const int64_t nc = j_end - j0 < b ? j_end - j0 : b;
    __syncthreads();
    for (int64_t x = tid; x < nc * d; x += b) {
      ks[x] = T(widen(K[tile_at(j0, x, d, rs)]));
      vs[x] = T(widen(V[tile_at(j0, x, d, rs)]));
    }
    __syncthreads();
    if (!live) continue;
    for (int64_t j = 0; j < nc; ++j) {
      if (a.causal && j0 + j > i) continue;
      T qk = 0, gv = 0;
      for (int64_t c = 0; c < d; ++c) {
        qk += qs[c * b + tid] * ks[j * d + c];
        gv += gs[c * b + tid] * vs[j * d + c];
      }
      const T p = dexp(qk * a.scale - lse_i), dsc = a.scale * p * (gv - delta_i);
      for (int64_t c = 0; c < d; ++c) dqs[c * b + tid] += dsc * ks[j * d + c];
    }
  }
  if (!live) return;
  const int64_t out_i = a.in.at(bh, a.t, d, i);
  for (int64_t c = 0; c < d; ++c) a.dq[out_i + c] = half_convert<S>(dqs[c * b + tid]);
}

template <class T>
void attention(const KernelContext& ctx, const Attention<T>& a, const NoExtra&) {
  if (a.bh == 0 || a.t == 0) return;
  const int64_t d = a.d;
  const int b = tile_for(sizeof(compute_t<T>), [d](int64_t b) { return 4 * b * d + b * b; });
  const int64_t n = tiles(a.t, b);
  Fwd<T> k{a.q.get(), a.k.get(), a.v.get(), a.out.get(),           a.lse.get(), a.t,   a.s,
           d,         n,         a.causal,  compute_t<T>(a.scale), a.in,        a.rows};
  const size_t bytes = size_t(4 * b * d + b * b) * sizeof(compute_t<T>);
  attention_fwd<T><<<unsigned(a.bh * n), unsigned(b), bytes, stream_of(ctx)>>>(k, b);
}

template <class T>
void attention_grad_prep(const KernelContext& ctx, const AttentionGradPrep<T>& a, const NoExtra&) {
  if (a.rows == 0) return;
  Prep<T> k{a.dout.get(), a.out.get(), a.lse.get(), a.stats.get(), a.rows, a.d, a.t, a.layout};
  attention_grad_prep_rows<T><<<blocks_for(a.rows), kThreads, 0, stream_of(ctx)>>>(k);
}

template <class T>
void attention_grad(const KernelContext& ctx, const AttentionGrad<T>& a, const NoExtra&) {
  if (a.bh == 0 || a.t == 0) return;  // the front-end writes zeros itself then
  const int64_t d = a.d, rows = a.bh * a.t;
  Bwd<T> k{a.dout.get(),
           a.q.get(),
           a.k.get(),
           a.v.get(),
           a.stats.get(),
           a.stats.get() + rows,
           a.dq.get(),
           a.dk.get(),
           a.dv.get(),
           a.t,
           a.s,
           d,
           0,
           a.causal,
           compute_t<T>(a.scale),
           a.in,
           a.rows};
  cudaStream_t st = stream_of(ctx);
  const int bkv = tile_for(sizeof(compute_t<T>), [d](int64_t b) { return 6 * b * d + 2 * b; });
  k.tiles = tiles(a.s, bkv);
  attention_bwd_kv<T><<<unsigned(a.bh * k.tiles), unsigned(bkv),
                        size_t(6 * bkv * d + 2 * bkv) * sizeof(compute_t<T>), st>>>(k, bkv);
  const int bq = tile_for(sizeof(compute_t<T>), [d](int64_t b) { return 5 * b * d; });
  k.tiles = tiles(a.t, bq);
  attention_bwd_q<T>
      <<<unsigned(a.bh * k.tiles), unsigned(bq), size_t(5 * bq * d) * sizeof(compute_t<T>), st>>>(
          k, bq);
}

template <class T>
void register_for() {
  CudaKernel<Attention<T>, NoExtra>::fn = &attention<T>;
  CudaKernel<AttentionGradPrep<T>, NoExtra>::fn = &attention_grad_prep<T>;
  CudaKernel<AttentionGrad<T>, NoExtra>::fn = &attention_grad<T>;
}

}  // namespace

void register_attention(OpList& ops) {
  register_for<float>();
  register_for<double>();
  register_for<bfloat16>();
  register_for<float16>();
  for (OpId id : {OpId::scaled_dot_product_attention, OpId::scaled_dot_product_attention_grad})
    ops[size_t(id)] = true;
}

}  // namespace tide::kernels::cuda
