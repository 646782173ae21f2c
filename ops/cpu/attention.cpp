// CPU entries of the attention family (ops/attention_kernels.h). The forward is tiled over
// (batch*head, block of kRows queries), parallel over those items, and walks the keys in
// tiles of kCols with an online softmax (running max and denominator per query row, the
// output accumulator rescaled when the max grows): memory beyond the inputs and outputs is
// a few tiles per task, never T x S. The gradient recomputes the probabilities from q, k
// and lse, parallel over independent items so that no two tasks add into one element, and
// sums dk and dv over the queries in order, dq over the keys in order. With enough heads per
// thread, one pass per (batch*head) does all three; otherwise two passes, dk and dv per
// (batch*head, key block), dq per (batch*head, query block). Both give the same bits, so
// they do not depend on the thread count. Sums are in T (float for float32), in a fixed order.
//
// A tile's scores are always kCols wide (the transposed key tile zero-padded past the keys),
// so that a row of scores, its exponentials (fn::exp_nonpositive, branch-free: masked keys
// are -inf and come out 0) and its max and sum (over 16 lanes, then halved in a fixed
// order) all run as vector loops; keys a row does not see (the causal mask, a tile's end)
// are left out of the products with v, k and q. For head sizes 16, 32 and 64 the kernels
// are compiled for that size, so that a query's output row and its dq row stay in vector
// registers across the keys; the operations and their order are those of the generic form.
// Rows are found through HeadRows, so q, k, v and their gradients may be the parts of a
// fused projection's (B, T, 3, H, D) rows and out and dout (B, T, H, D) rows.
// The 16-bit types (bfloat16, float16) run the float32 kernels on widened contiguous copies
// in one workspace, their results rounded once into their layout: the float32 computation.
// Not here: BLAS per tile, SIMD intrinsics (the loops run over contiguous dimensions, which
// the compiler vectorises).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/allocator.h"
#include "core/float16.h"
#include "core/thread_pool.h"
#include "ops/attention_kernels.h"
#include "ops/cpu/isa_parallel.h"
#include "ops/functors.h"
#include "ops/op_util.h"

namespace tide::kernels::cpu {

using tide::detail::grain_for;
using tide::detail::isa_parallel_for;

namespace {

constexpr int64_t kRows = 32, kCols = 64;

int64_t blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

// x's rows j0 .. j0 + nc (d wide, rs apart) transposed into xt (d, kCols), the columns past
// nc zero, so that the products with one query row run along a whole tile.
template <class T>
[[gnu::always_inline]] inline void transpose_tile(const T* x, int64_t rs, int64_t j0, int64_t nc,
                                                  int64_t d, T* xt) {
  for (int64_t c = 0; c < d; ++c) {
    T* col = xt + c * kCols;
    for (int64_t j = 0; j < nc; ++j) col[j] = x[(j0 + j) * rs + c];
    for (int64_t j = nc; j < kCols; ++j) col[j] = T(0);
  }
}

// out[j] = a . xt[:, j] for the kCols columns of a transposed tile, summed over c in order
// in a local array the compiler keeps in vector registers.
template <class T>
[[gnu::always_inline]] inline void row_times_tile(const T* a, const T* xt, int64_t d, T* out) {
  T acc[kCols] = {};
  for (int64_t c = 0; c < d; ++c) {
    const T ac = a[c];
    const T* x = xt + c * kCols;
    for (int64_t j = 0; j < kCols; ++j) acc[j] += ac * x[j];
  }
  for (int64_t j = 0; j < kCols; ++j) out[j] = acc[j];
}

constexpr int kLanes = 16;
static_assert(kCols % kLanes == 0);

// The max and the sum of a tile's kCols values: kLanes running lanes, then halved in a fixed
// order, so that they vectorise and give the same bits wherever they run.
template <class T>
[[gnu::always_inline]] inline T tile_max(const T* x) {
  T m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = x[l];
  for (int64_t j = kLanes; j < kCols; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] = m[l] < x[j + l] ? x[j + l] : m[l];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) m[l] = m[l] < m[l + w] ? m[l + w] : m[l];
  return m[0];
}
template <class T>
[[gnu::always_inline]] inline T tile_sum(const T* x) {
  T m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = x[l];
  for (int64_t j = kLanes; j < kCols; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] += x[j + l];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) m[l] += m[l + w];
  return m[0];
}

// o = o * corr + sum_j p[j] v[j] over the nc rows of v, rs apart (D = d when it is a
// compile-time size: the row then stays in vector registers across the keys; 0: any d).
// The same operations in the same order either way.
template <int D, class T>
[[gnu::always_inline]] inline void rescale_add_rows(T* o, T corr, const T* p, const T* v,
                                                    int64_t rs, int64_t nc, int64_t d) {
  if constexpr (D > 0) {
    T acc[D];
    for (int c = 0; c < D; ++c) acc[c] = o[c] * corr;
    for (int64_t j = 0; j < nc; ++j) {
      const T pj = p[j];
      const T* vr = v + j * rs;
      for (int c = 0; c < D; ++c) acc[c] += pj * vr[c];
    }
    for (int c = 0; c < D; ++c) o[c] = acc[c];
  } else {
    for (int64_t c = 0; c < d; ++c) o[c] *= corr;
    for (int64_t j = 0; j < nc; ++j) {
      const T pj = p[j];
      const T* vr = v + j * rs;
      for (int64_t c = 0; c < d; ++c) o[c] += pj * vr[c];
    }
  }
}

}  // namespace

template <int D, class T>
void attention_fixed_d(const Attention<T>& a) {
  const int64_t t = a.t, s = a.s, d = a.d, qblocks = blocks(t, kRows);
  const int64_t rs = a.in.stride(d), ro = a.rows.stride(d);
  const T scale = T(a.scale);
  const T* q = a.q.get();
  const T* k = a.k.get();
  const T* v = a.v.get();
  T* out = a.out.get();
  T* lse = a.lse.get();
  isa_parallel_for(
      a.bh * qblocks,
      grain_for(4 * kRows * s * d), [&](int64_t w0, int64_t w1) __attribute__((always_inline)) {
        std::vector<T> kt(size_t(d * kCols)), acc(size_t(kRows * d));
        T m[kRows], l[kRows];
        alignas(64) T p[kCols];
        constexpr T kNegInf = -std::numeric_limits<T>::infinity();
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t b = w / qblocks, i0 = (w % qblocks) * kRows, nr = std::min(kRows, t - i0);
          const T* Q = q + a.in.at(b, t, d, i0);
          const T* K = k + a.in.at(b, s, d, 0);
          const T* V = v + a.in.at(b, s, d, 0);
          std::fill(acc.begin(), acc.end(), T(0));
          std::fill(m, m + kRows, kNegInf);
          std::fill(l, l + kRows, T(0));
          // Under the causal mask no query of this block sees a key past its last row.
          const int64_t j_end = a.causal ? std::min(s, i0 + nr) : s;
          for (int64_t j0 = 0; j0 < j_end; j0 += kCols) {
            const int64_t nc = std::min(kCols, j_end - j0);
            transpose_tile(K, rs, j0, nc, d, kt.data());
            for (int64_t r = 0; r < nr; ++r) {
              // The keys this row sees in the tile: all nc, or up to its own position.
              const int64_t seen = a.causal ? std::min(nc, i0 + r - j0 + 1) : nc;
              row_times_tile(Q + r * rs, kt.data(), d, p);
              for (int64_t j = 0; j < kCols; ++j) {
                const T x = p[j] * scale;  // computed for every j: a select, not a branch
                p[j] = j < seen ? x : kNegInf;
              }
              // The first tile holds key 0, which every query sees: m is finite from then on.
              const T m_new = std::max(m[r], tile_max(p));
              const T corr = fn::exp_nonpositive(m[r] - m_new);
              for (int64_t j = 0; j < kCols; ++j) p[j] = fn::exp_nonpositive(p[j] - m_new);
              l[r] = l[r] * corr + tile_sum(p);
              m[r] = m_new;
              rescale_add_rows<D>(acc.data() + r * d, corr, p, V + j0 * rs, rs, seen, d);
            }
          }
          for (int64_t r = 0; r < nr; ++r) {
            const T inv = T(1) / l[r];
            const T* o = acc.data() + r * d;
            T* y = out + a.rows.at(b, t, d, i0) + r * ro;
            for (int64_t c = 0; c < d; ++c) y[c] = o[c] * inv;
            lse[b * t + i0 + r] = m[r] + std::log(l[r]);
          }
        }
      });
}

namespace {

// The bh * len rows of x (laid out as `at`) widened to float into the contiguous y
// (bh, len, d), and back from a contiguous x into y's layout, rounded once.
template <class T>
void widen_into(const T* x, HeadRows at, int64_t bh, int64_t len, int64_t d, float* y) {
  parallel_for(bh * len, grain_for(d), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + at.at(r / len, len, d, r % len);
      for (int64_t c = 0; c < d; ++c) y[r * d + c] = widen(xr[c]);
    }
  });
}
template <class T>
void round_into(const float* x, T* y, HeadRows at, int64_t bh, int64_t len, int64_t d) {
  parallel_for(bh * len, grain_for(d), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* yr = y + at.at(r / len, len, d, r % len);
      for (int64_t c = 0; c < d; ++c) yr[c] = half_convert<T>(x[r * d + c]);
    }
  });
}

// Float scratch of n elements for a 16-bit kernel, from the allocator (it counts against
// its limit; over it, the op fails).
StorageRef float_workspace(int64_t n, const char* op) {
  return Allocator::get().workspace(size_t(std::max<int64_t>(n, 1)) * sizeof(float), op);
}

}  // namespace

template <class T>
void attention(const KernelContext& ctx, const Attention<T>& a, const NoExtra& e) {
  if constexpr (is_half_v<T>) {
    const int64_t nq = a.bh * a.t * a.d, nk = a.bh * a.s * a.d;
    const StorageRef ws = float_workspace(2 * nq + 2 * nk, "scaled_dot_product_attention");
    Storage* w = ws.get();
    const Attention<float> f{{w, 0}, {w, nq}, {w, nq + nk}, {w, nq + 2 * nk}, a.lse,  a.bh,
                             a.t,    a.s,     a.d,          a.causal,         a.scale};
    widen_into(a.q.get(), a.in, a.bh, a.t, a.d, f.q.get());
    widen_into(a.k.get(), a.in, a.bh, a.s, a.d, f.k.get());
    widen_into(a.v.get(), a.in, a.bh, a.s, a.d, f.v.get());
    attention(ctx, f, e);
    round_into(f.out.get(), a.out.get(), a.rows, a.bh, a.t, a.d);
  } else {
    // The head sizes of common models at compile time (GPT-2's 64, the char model's 32).
    switch (a.d) {
      case 16: return attention_fixed_d<16>(a);
      case 32: return attention_fixed_d<32>(a);
      case 64: return attention_fixed_d<64>(a);
      default: return attention_fixed_d<0>(a);
    }
  }
}

template <class T>
void attention_grad_prep(const KernelContext&, const AttentionGradPrep<T>& a, const NoExtra&) {
  using R = compute_t<T>;
  const int64_t rows = a.rows, d = a.d, t = a.t;
  const R* lse = a.lse.get();
  R* stats = a.stats.get();
  parallel_for(rows, grain_for(2 * d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = a.layout.at(r / t, t, d, r % t);
      const T* dout = a.dout.get() + at;
      const T* out = a.out.get() + at;
      double sum = 0;
      for (int64_t c = 0; c < d; ++c) sum += double(widen(dout[c])) * double(widen(out[c]));
      stats[r] = lse[r];
      stats[rows + r] = R(sum);
    }
  });
}

namespace {

// For query row i against a tile of keys starting at j0 (kt and vt the transposed, padded
// k and v tiles), of which the row sees the first `seen`: p[j] = the probability, ds[j] =
// scale * p * (dout_i . v_j - delta_i); both 0 past `seen`.
template <class T>
[[gnu::always_inline]] inline void probs_and_dscores(const T* qi, const T* doi, const T* kt,
                                                     const T* vt, int64_t seen, int64_t d, T scale,
                                                     T lse_i, T delta_i, T* p, T* ds) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  row_times_tile(qi, kt, d, p);
  row_times_tile(doi, vt, d, ds);
  for (int64_t j = 0; j < kCols; ++j) {
    const T x = p[j] * scale - lse_i;  // computed for every j: a select, not a branch
    const T pj = fn::exp_nonpositive(j < seen ? x : kNegInf);
    p[j] = pj;
    ds[j] = scale * pj * (ds[j] - delta_i);
  }
}

}  // namespace

// Two passes, each parallel over (batch*head, block): for few heads and long sequences.
template <class T>
void attention_grad_two_pass(const AttentionGrad<T>& a) {
  const int64_t t = a.t, s = a.s, d = a.d, rows = a.bh * t;
  const int64_t rs = a.in.stride(d), rg = a.rows.stride(d);
  const T scale = T(a.scale);
  const T* lse = a.stats.get();
  const T* delta = lse + rows;
  // dk and dv: one item per (batch*head, key block), the queries added in order.
  const int64_t kblocks = blocks(s, kCols);
  isa_parallel_for(
      a.bh * kblocks,
      grain_for(8 * kCols * t * d), [&](int64_t w0, int64_t w1) __attribute__((always_inline)) {
        std::vector<T> kt(size_t(d * kCols)), vt(size_t(d * kCols)), p(static_cast<size_t>(kCols)),
            ds(static_cast<size_t>(kCols));
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t b = w / kblocks, j0 = (w % kblocks) * kCols, nc = std::min(kCols, s - j0);
          const T* Q = a.q.get() + a.in.at(b, t, d, 0);
          const T* G = a.dout.get() + a.rows.at(b, t, d, 0);
          transpose_tile(a.k.get() + a.in.at(b, s, d, 0), rs, j0, nc, d, kt.data());
          transpose_tile(a.v.get() + a.in.at(b, s, d, 0), rs, j0, nc, d, vt.data());
          T* dk = a.dk.get() + a.in.at(b, s, d, j0);
          T* dv = a.dv.get() + a.in.at(b, s, d, j0);
          for (int64_t j = 0; j < nc; ++j) {
            std::fill(dk + j * rs, dk + j * rs + d, T(0));
            std::fill(dv + j * rs, dv + j * rs + d, T(0));
          }
          // Under the causal mask queries before j0 see none of these keys.
          for (int64_t i = a.causal ? j0 : 0; i < t; ++i) {
            const int64_t r = b * t + i;
            const T* qi = Q + i * rs;
            const T* doi = G + i * rg;
            const int64_t seen = a.causal ? std::min(nc, i - j0 + 1) : nc;
            probs_and_dscores(qi, doi, kt.data(), vt.data(), seen, d, scale, lse[r], delta[r],
                              p.data(), ds.data());
            for (int64_t j = 0; j < seen; ++j) {
              const T pj = p[j], dsj = ds[j];
              T* dkj = dk + j * rs;
              T* dvj = dv + j * rs;
              for (int64_t c = 0; c < d; ++c) {
                dvj[c] += pj * doi[c];
                dkj[c] += dsj * qi[c];
              }
            }
          }
        }
      });
  // dq: one item per (batch*head, query block), the keys added in order.
  const int64_t qblocks = blocks(t, kRows);
  isa_parallel_for(
      a.bh * qblocks,
      grain_for(8 * kRows * s * d), [&](int64_t w0, int64_t w1) __attribute__((always_inline)) {
        std::vector<T> kt(size_t(d * kCols)), vt(size_t(d * kCols)), p(static_cast<size_t>(kCols)),
            ds(static_cast<size_t>(kCols));
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t b = w / qblocks, i0 = (w % qblocks) * kRows, nr = std::min(kRows, t - i0);
          const T* Q = a.q.get() + a.in.at(b, t, d, 0);
          const T* G = a.dout.get() + a.rows.at(b, t, d, 0);
          const T* K = a.k.get() + a.in.at(b, s, d, 0);
          const T* V = a.v.get() + a.in.at(b, s, d, 0);
          T* dq = a.dq.get() + a.in.at(b, t, d, i0);
          for (int64_t ii = 0; ii < nr; ++ii) std::fill(dq + ii * rs, dq + ii * rs + d, T(0));
          const int64_t j_end = a.causal ? std::min(s, i0 + nr) : s;
          for (int64_t j0 = 0; j0 < j_end; j0 += kCols) {
            const int64_t nc = std::min(kCols, j_end - j0);
            transpose_tile(K, rs, j0, nc, d, kt.data());
            transpose_tile(V, rs, j0, nc, d, vt.data());
            for (int64_t ii = 0; ii < nr; ++ii) {
              const int64_t i = i0 + ii, r = b * t + i;
              const int64_t seen = a.causal ? std::min(nc, i - j0 + 1) : nc;
              probs_and_dscores(Q + i * rs, G + i * rg, kt.data(), vt.data(), seen, d, scale,
                                lse[r], delta[r], p.data(), ds.data());
              T* dqi = dq + ii * rs;
              for (int64_t j = 0; j < seen; ++j) {
                const T dsj = ds[j];
                const T* kj = K + (j0 + j) * rs;
                for (int64_t c = 0; c < d; ++c) dqi[c] += dsj * kj[c];
              }
            }
          }
        }
      });
}

// dv += p * do, dk += ds * q, dq += ds * k over one row of d: restrict, so the loop
// vectorises (three outputs that might alias would keep it scalar).
template <class T>
[[gnu::always_inline]] inline void add_three(T* __restrict dv, T* __restrict dk, T* __restrict dq,
                                             const T* __restrict doi, const T* __restrict qi,
                                             const T* __restrict kj, T p, T ds, int64_t d) {
  for (int64_t c = 0; c < d; ++c) {
    dv[c] += p * doi[c];
    dk[c] += ds * qi[c];
    dq[c] += ds * kj[c];
  }
}

// Query row i against the nc keys of a tile (rows of dv, dk and k rs apart): dv[j] += p[j]
// do_i, dk[j] += ds[j] q_i, and dq_i += sum_j ds[j] k_j in key order. D = d at compile time
// keeps the dq row (and do_i, q_i) in vector registers across the keys; 0: any d. The same
// operations in the same order.
template <int D, class T>
[[gnu::always_inline]] inline void add_row_grads(T* dv, T* dk, T* __restrict dqi,
                                                 const T* __restrict doi, const T* __restrict qi,
                                                 const T* k, int64_t rs, const T* p, const T* ds,
                                                 int64_t nc, int64_t d) {
  if constexpr (D > 0) {
    T dq[D], dor[D], qr[D];
    for (int c = 0; c < D; ++c) dq[c] = dqi[c], dor[c] = doi[c], qr[c] = qi[c];
    for (int64_t j = 0; j < nc; ++j) {
      const T pj = p[j], dsj = ds[j];
      T* __restrict dvj = dv + j * rs;
      T* __restrict dkj = dk + j * rs;
      const T* __restrict kj = k + j * rs;
      for (int c = 0; c < D; ++c) {
        dvj[c] += pj * dor[c];
        dkj[c] += dsj * qr[c];
        dq[c] += dsj * kj[c];
      }
    }
    for (int c = 0; c < D; ++c) dqi[c] = dq[c];
  } else {
    for (int64_t j = 0; j < nc; ++j)
      add_three(dv + j * rs, dk + j * rs, dqi, doi, qi, k + j * rs, p[j], ds[j], d);
  }
}

// One pass per (batch*head): for each key block, each query in order adds into dk and dv
// (the queries in order, as the two-pass form) and into its dq row (the keys in order,
// across blocks and within one, as the two-pass form): the same bits, with the
// probabilities computed once instead of twice.
template <int D, class T>
void attention_grad_one_pass(const AttentionGrad<T>& a) {
  const int64_t t = a.t, s = a.s, d = a.d, rows = a.bh * t;
  const int64_t rs = a.in.stride(d), rg = a.rows.stride(d);
  const T scale = T(a.scale);
  const T* lse = a.stats.get();
  const T* delta = lse + rows;
  isa_parallel_for(
      a.bh, grain_for(16 * t * s * d), [&](int64_t b0, int64_t b1) __attribute__((always_inline)) {
        std::vector<T> kt(size_t(d * kCols)), vt(size_t(d * kCols)), p(static_cast<size_t>(kCols)),
            ds(static_cast<size_t>(kCols));
        for (int64_t b = b0; b < b1; ++b) {
          const T* Q = a.q.get() + a.in.at(b, t, d, 0);
          const T* G = a.dout.get() + a.rows.at(b, t, d, 0);
          const T* K = a.k.get() + a.in.at(b, s, d, 0);
          const T* V = a.v.get() + a.in.at(b, s, d, 0);
          T* dq = a.dq.get() + a.in.at(b, t, d, 0);
          T* dkb = a.dk.get() + a.in.at(b, s, d, 0);
          T* dvb = a.dv.get() + a.in.at(b, s, d, 0);
          for (int64_t i = 0; i < t; ++i) std::fill(dq + i * rs, dq + i * rs + d, T(0));
          for (int64_t j = 0; j < s; ++j) {
            std::fill(dkb + j * rs, dkb + j * rs + d, T(0));
            std::fill(dvb + j * rs, dvb + j * rs + d, T(0));
          }
          for (int64_t j0 = 0; j0 < s; j0 += kCols) {
            const int64_t nc = std::min(kCols, s - j0);
            transpose_tile(K, rs, j0, nc, d, kt.data());
            transpose_tile(V, rs, j0, nc, d, vt.data());
            for (int64_t i = a.causal ? j0 : 0; i < t; ++i) {
              const int64_t r = b * t + i;
              const T* qi = Q + i * rs;
              const T* doi = G + i * rg;
              const int64_t seen = a.causal ? std::min(nc, i - j0 + 1) : nc;
              probs_and_dscores(qi, doi, kt.data(), vt.data(), seen, d, scale, lse[r], delta[r],
                                p.data(), ds.data());
              add_row_grads<D>(dvb + j0 * rs, dkb + j0 * rs, dq + i * rs, doi, qi, K + j0 * rs, rs,
                               p.data(), ds.data(), seen, d);
            }
          }
        }
      });
}

template <class T>
void attention_grad(const KernelContext& ctx, const AttentionGrad<T>& a, const NoExtra& e) {
  if constexpr (is_half_v<T>) {
    // dout, q, k, v widened, dq, dk, dv computed in float and rounded once.
    const int64_t nq = a.bh * a.t * a.d, nk = a.bh * a.s * a.d;
    const StorageRef ws = float_workspace(3 * nq + 4 * nk, "scaled_dot_product_attention_grad");
    Storage* w = ws.get();
    const AttentionGrad<float> f{{w, 0},
                                 {w, nq},
                                 {w, 2 * nq},
                                 {w, 2 * nq + nk},
                                 a.stats,
                                 {w, 2 * nq + 2 * nk},
                                 {w, 3 * nq + 2 * nk},
                                 {w, 3 * nq + 3 * nk},
                                 a.bh,
                                 a.t,
                                 a.s,
                                 a.d,
                                 a.causal,
                                 a.scale};
    widen_into(a.dout.get(), a.rows, a.bh, a.t, a.d, f.dout.get());
    widen_into(a.q.get(), a.in, a.bh, a.t, a.d, f.q.get());
    widen_into(a.k.get(), a.in, a.bh, a.s, a.d, f.k.get());
    widen_into(a.v.get(), a.in, a.bh, a.s, a.d, f.v.get());
    attention_grad(ctx, f, e);
    round_into(f.dq.get(), a.dq.get(), a.in, a.bh, a.t, a.d);
    round_into(f.dk.get(), a.dk.get(), a.in, a.bh, a.s, a.d);
    round_into(f.dv.get(), a.dv.get(), a.in, a.bh, a.s, a.d);
  } else {
    // Both forms give the same bits; the one-pass form needs a few heads per thread.
    if (a.bh < 2 * int64_t(tide::num_threads())) return attention_grad_two_pass(a);
    switch (a.d) {  // the head sizes the forward specialises
      case 16: return attention_grad_one_pass<16>(a);
      case 32: return attention_grad_one_pass<32>(a);
      case 64: return attention_grad_one_pass<64>(a);
      default: return attention_grad_one_pass<0>(a);
    }
  }
}

#define TIDE_ATTENTION(T)                                                                 \
  template void attention<T>(const KernelContext&, const Attention<T>&, const NoExtra&);  \
  template void attention_grad_prep<T>(const KernelContext&, const AttentionGradPrep<T>&, \
                                       const NoExtra&);                                   \
  template void attention_grad<T>(const KernelContext&, const AttentionGrad<T>&, const NoExtra&);
TIDE_ATTENTION(float)
TIDE_ATTENTION(double)
TIDE_ATTENTION(bfloat16)
TIDE_ATTENTION(float16)
#undef TIDE_ATTENTION

}  // namespace tide::kernels::cpu
