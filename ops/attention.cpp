// The attention family's front-end (ops/attention.h): argument checks, the shape rule and
// the gradient over the kernel entries of ops/attention_kernels.h (CPU:
// ops/cpu/attention.cpp, CUDA: ops/cuda/attention.cu). 16-bit operands run 16-bit kernels on
// every device (float32 inside, lse and the gradient's statistics in float32). Not here: the
// kernels, or any composition of matmul and softmax (tests/ops/test_attention.cpp keeps that as the
// reference).
#include "ops/attention.h"

#include <cmath>

#include "ops/attention_kernels.h"
#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/checkpoint_keep.h"
#include "ops/creation.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;

namespace {

// The checked sizes of one call: q (bh, t, d), k and v (bh, s, d).
struct Dims {
  int64_t bh = 0, t = 0, s = 0, d = 0;
  double scale = 1.0;
};

// The checks every form shares, and the scale: D and S at least 1, a finite scale, D within
// a GPU's tiles.
template <class Shapes>
void check_d_and_scale(const char* op, Dims& dm, std::optional<double> scale, const Tensor& q,
                       const Shapes& shapes) {
  TIDE_CHECK(dm.d > 0 && dm.s > 0, op, "needs D >= 1 and S >= 1, got ", shapes());
  if (scale) {
    TIDE_CHECK(std::isfinite(*scale), op, "scale must be finite, got ", *scale);
    dm.scale = *scale;
  } else {
    dm.scale = 1.0 / std::sqrt(double(dm.d));
  }
  if (!q.device().is_cpu()) {
    // The tiles hold the computing type: float for float32 and the 16-bit types.
    const int64_t max_d =
        q.dtype() == DType::float64 ? kernels::kAttentionCudaMaxD8 : kernels::kAttentionCudaMaxD4;
    TIDE_CHECK(dm.d <= max_d, op, "on ", q.device().str(), " D is at most ", max_d, " for ",
               name(q.dtype()), ", got ", shapes());
  }
}

Dims check_args(OpId id, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                std::optional<double> scale) {
  const char* op = op_name(id);
  check_same(q, k, id);
  check_same(q, v, id);
  check_floating(q, op);
  const auto shapes = [&] { return describe(q) + ", " + describe(k) + ", " + describe(v); };
  const int r = q.ndim();
  TIDE_CHECK((r == 3 || r == 4) && k.ndim() == r && v.ndim() == r, op,
             "expected q, k, v all (B, H, T, D) or all (B*H, T, D), got ", shapes());
  for (int i = 0; i < r - 2; ++i)
    TIDE_CHECK(k.size(i) == q.size(i) && v.size(i) == q.size(i), op,
               "batch and head dimensions differ: ", shapes());
  TIDE_CHECK(k.shape() == v.shape(), op, "k and v must have one shape (S keys of width D), got ",
             shapes());
  Dims dm;
  dm.t = q.size(r - 2);
  dm.s = k.size(r - 2);
  dm.d = q.size(r - 1);
  dm.bh = r == 4 ? q.size(0) * q.size(1) : q.size(0);
  TIDE_CHECK(k.size(r - 1) == dm.d, op, "q and k differ in D: ", shapes());
  TIDE_CHECK(!causal || dm.t == dm.s, op, "causal needs as many queries as keys (T == S), got ",
             shapes());
  check_d_and_scale(op, dm, scale, q, shapes);
  return dm;
}

Shape lse_shape(const Tensor& q) {
  const int r = q.ndim();
  return r == 4 ? Shape{q.size(0), q.size(1), q.size(2)} : Shape{q.size(0), q.size(1)};
}

// lse's (and the gradient's statistics') dtype: float32 for 16-bit q, else q's.
DType lse_dtype(const Tensor& q) { return is_half(q.dtype()) ? DType::float32 : q.dtype(); }

// How the kernels find the rows: q, k and v (and dq, dk, dv) laid out as `in`, k and v (dk,
// dv) starting k_at and v_at elements into their tensors; out and dout as `rows`. The
// default: each its own contiguous (bh, len, d).
struct Layout {
  kernels::HeadRows in{}, rows{};
  int64_t k_at = 0, v_at = 0;
};

template <class T>
DataRef<T> at(const Tensor& t, int64_t offset) {
  DataRef<T> r = t.ref<T>();
  r.offset += offset;
  return r;
}

// Queues the forward kernel: out and lse from q, k and v.
void attention_forward_into(const AttentionForward& f, const Tensor& q, const Tensor& k,
                            const Tensor& v, bool causal, const Dims& dm, const Layout& lay,
                            Site site) {
  const OpId id = OpId::scaled_dot_product_attention;
  dispatch_floating_with_half(q.dtype(), [&](auto z) {
    using T = decltype(z);
    kernels::Attention<T> a{q.ref<T>(),
                            at<T>(k, lay.k_at),
                            at<T>(v, lay.v_at),
                            f.out.ref<T>(),
                            f.lse.ref<compute_t<T>>(),
                            dm.bh,
                            dm.t,
                            dm.s,
                            dm.d,
                            causal,
                            dm.scale,
                            lay.in,
                            lay.rows};
    kernels::queue(id, q.device(), {q.storage(), k.storage(), v.storage()},
                   {f.out.storage(), f.lse.storage()}, &kernels::cpu::attention<T>, a,
                   kernels::NoExtra{}, site);
  });
}

// The forward's results of `out_shape` (lse (bh, t) as lse_shape says) for q's dtype and
// device, or those a checkpoint's recompute kept (ops/checkpoint_keep.h): then nothing runs.
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                   const Dims& dm, const Layout& lay, const Shape& out_shape,
                                   const Shape& lse_at, Site site) {
  const OpId id = OpId::scaled_dot_product_attention;
  const char* op = op_name(id);
  if (detail::KeepTape::active()) {
    std::vector<Tensor> kept =
        detail::KeepTape::reuse(id, 0, {out_shape, lse_at}, {q.dtype(), lse_dtype(q)});
    if (!kept.empty()) return {kept[0], kept[1]};
  }
  AttentionForward f{Tensor::empty(out_shape, q.dtype(), q.device(), op),
                     Tensor::empty(lse_at, lse_dtype(q), q.device(), op)};
  if (detail::KeepTape::active()) detail::KeepTape::produced(id, 0, {f.out, f.lse});
  if (f.out.numel() > 0) attention_forward_into(f, q, k, v, causal, dm, lay, site);
  return f;
}

}  // namespace

AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, bool causal,
                                                      std::optional<double> scale, Site site) {
  const OpId id = OpId::scaled_dot_product_attention;
  const Dims dm = check_args(id, q, k, v, causal, scale);
  return attention_forward(q, k, v, causal, dm, Layout{}, q.shape(), lse_shape(q), site);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<double> scale, Site site) {
  if (Tensor lq = q, lk = k, lv = v; autocast::lower({&lq, &lk, &lv}, site))
    return scaled_dot_product_attention(lq, lk, lv, causal, scale, site);
  AttentionForward f = scaled_dot_product_attention_forward(q, k, v, causal, scale, site);
  autograd::record(OpId::scaled_dot_product_attention, f.out, {&q, &k, &v},
                   [q = q.detach(), k = k.detach(), v = v.detach(), out = f.out.detach(),
                    lse = f.lse, causal, scale](const Tensor& g) {
                     AttentionGrads d =
                         scaled_dot_product_attention_grad(g, q, k, v, out, lse, causal, scale);
                     return std::vector<Tensor>{d.q, d.k, d.v};
                   });
  return f.out;
}

namespace {
// The backward's kernels, writing into g (fresh tensors, or slices of one: then the writes
// name that one storage once), laid out as q, k and v are.
void attention_grad_into(const AttentionGrads& g, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                         bool causal, const Dims& dm, Site site, const Layout& lay = {}) {
  const OpId id = OpId::scaled_dot_product_attention_grad;
  const char* op = op_name(id);
  const int64_t rows = dm.bh * dm.t;
  // Row 0 lse, row 1 delta: one storage, so the gradient entry reads five and writes three
  // (an engine task touches at most eight).
  Tensor stats = Tensor::empty(Shape{2, rows}, lse_dtype(q), q.device(), op);
  const bool one = g.q.storage() == g.k.storage() && g.k.storage() == g.v.storage();
  dispatch_floating_with_half(q.dtype(), [&](auto z) {
    using T = decltype(z);
    using R = compute_t<T>;
    kernels::AttentionGradPrep<T> p{dout.ref<T>(), out.ref<T>(), lse.ref<R>(), stats.ref<R>(),
                                    rows,          dm.d,         dm.t,         lay.rows};
    kernels::queue(id, q.device(), {dout.storage(), out.storage(), lse.storage()},
                   {stats.storage()}, &kernels::cpu::attention_grad_prep<T>, p, kernels::NoExtra{},
                   site);
    kernels::AttentionGrad<T> a{dout.ref<T>(),
                                q.ref<T>(),
                                at<T>(k, lay.k_at),
                                at<T>(v, lay.v_at),
                                stats.ref<R>(),
                                g.q.ref<T>(),
                                at<T>(g.k, lay.k_at),
                                at<T>(g.v, lay.v_at),
                                dm.bh,
                                dm.t,
                                dm.s,
                                dm.d,
                                causal,
                                dm.scale,
                                lay.in,
                                lay.rows};
    if (one)
      kernels::queue(
          id, q.device(), {dout.storage(), q.storage(), k.storage(), v.storage(), stats.storage()},
          {g.q.storage()}, &kernels::cpu::attention_grad<T>, a, kernels::NoExtra{}, site);
    else
      kernels::queue(id, q.device(),
                     {dout.storage(), q.storage(), k.storage(), v.storage(), stats.storage()},
                     {g.q.storage(), g.k.storage(), g.v.storage()},
                     &kernels::cpu::attention_grad<T>, a, kernels::NoExtra{}, site);
  });
}

// The q, k and v slices of a packed (3, ...) tensor, as views of its storage.
AttentionGrads packed_parts(const Tensor& t) {
  std::vector<int64_t> part = t.shape().vec();
  part.erase(part.begin());
  return {t.slice(0, 1).reshape(part), t.slice(1, 2).reshape(part), t.slice(2, 3).reshape(part)};
}

void check_grad_args(OpId id, const Tensor& dout, const Tensor& q, const Tensor& out,
                     const Tensor& lse) {
  const char* op = op_name(id);
  check_same(q, dout, id);
  check_same(q, out, id);
  check_defined(lse, op);
  TIDE_CHECK(lse.dtype() == lse_dtype(q) && lse.device() == q.device(), op, "lse ", describe(lse),
             " must be ", name(lse_dtype(q)), " on ", q.device().str(), " for q ", describe(q));
  TIDE_CHECK(dout.shape() == q.shape() && out.shape() == q.shape(), op, "dout ", describe(dout),
             " and out ", describe(out), " must have q's shape ", describe(q));
  TIDE_CHECK(lse.shape() == lse_shape(q), op, "lse ", describe(lse), " must be ",
             lse_shape(q).str(), " for q ", describe(q));
}
}  // namespace

AttentionGrads scaled_dot_product_attention_grad(const Tensor& dout, const Tensor& q,
                                                 const Tensor& k, const Tensor& v,
                                                 const Tensor& out, const Tensor& lse, bool causal,
                                                 std::optional<double> scale, Site site) {
  const OpId id = OpId::scaled_dot_product_attention_grad;
  const char* op = op_name(id);
  const Dims dm = check_args(id, q, k, v, causal, scale);
  check_grad_args(id, dout, q, out, lse);
  AttentionGrads g{Tensor::empty(q.shape(), q.dtype(), q.device(), op),
                   Tensor::empty(k.shape(), k.dtype(), k.device(), op),
                   Tensor::empty(v.shape(), v.dtype(), v.device(), op)};
  if (dm.bh * dm.t == 0) {
    // No query attends: dk and dv are zeros.
    g.k = zeros(k.shape(), k.dtype(), k.device());
    g.v = zeros(v.shape(), v.dtype(), v.device());
    return g;
  }
  attention_grad_into(g, dout, q, k, v, out, lse, causal, dm, site);
  return g;
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv, bool causal,
                                           std::optional<double> scale, Site site) {
  if (Tensor l = qkv; autocast::lower({&l}, site))
    return scaled_dot_product_attention_packed(l, causal, scale, site);
  const OpId id = OpId::scaled_dot_product_attention;
  const char* op = op_name(id);
  check_defined(qkv, op);
  TIDE_CHECK((qkv.ndim() == 4 || qkv.ndim() == 5) && qkv.size(0) == 3, op,
             "packed qkv must be (3, B, H, T, D) or (3, B*H, T, D), got ", describe(qkv));
  // Views of the three slices with no history: the node below is qkv's.
  const AttentionGrads in = packed_parts(qkv.detach());
  AttentionForward f = scaled_dot_product_attention_forward(in.q, in.k, in.v, causal, scale, site);
  const Dims dm = check_args(id, in.q, in.k, in.v, causal, scale);
  autograd::record(id, f.out, {&qkv},
                   [in, out = f.out.detach(), lse = f.lse, causal, dm, shape = qkv.shape(),
                    site](const Tensor& g) {
                     const OpId gid = OpId::scaled_dot_product_attention_grad;
                     check_grad_args(gid, g, in.q, out, lse);
                     if (dm.bh * dm.t == 0)
                       return std::vector<Tensor>{zeros(shape, in.q.dtype(), in.q.device())};
                     Tensor d = Tensor::empty(shape, in.q.dtype(), in.q.device(), op_name(gid));
                     attention_grad_into(packed_parts(d), g, in.q, in.k, in.v, out, lse, causal, dm,
                                         site);
                     return std::vector<Tensor>{d};
                   });
  return f.out;
}

Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, bool causal, std::optional<double> scale,
                                        Site site) {
  if (Tensor l = qkv; autocast::lower({&l}, site))
    return scaled_dot_product_attention_qkv(l, causal, scale, site);
  const OpId id = OpId::scaled_dot_product_attention;
  const char* op = op_name(id);
  check_defined(qkv, op);
  check_floating(qkv, op);
  const auto shapes = [&] { return describe(qkv); };
  TIDE_CHECK(qkv.ndim() == 5 && qkv.size(2) == 3, op, "qkv must be (B, T, 3, H, D), got ",
             shapes());
  const int64_t b = qkv.size(0), t = qkv.size(1), h = qkv.size(3), d = qkv.size(4);
  Dims dm;
  dm.bh = b * h;
  dm.t = dm.s = t;
  dm.d = d;
  check_d_and_scale(op, dm, scale, qkv, shapes);
  const Layout lay{{h, 3 * h * d}, {h, h * d}, h * d, 2 * h * d};
  const Tensor in = qkv.detach();
  AttentionForward f =
      attention_forward(in, in, in, causal, dm, lay, Shape{b, t, h, d}, Shape{b, h, t}, site);
  autograd::record(id, f.out, {&qkv},
                   [in, out = f.out.detach(), lse = f.lse, causal, dm, lay, site](const Tensor& g) {
                     const char* gop = op_name(OpId::scaled_dot_product_attention_grad);
                     check_same(out, g, OpId::scaled_dot_product_attention_grad);
                     TIDE_CHECK(g.shape() == out.shape(), gop, "dout ", describe(g),
                                " must have the output's shape ", describe(out));
                     if (dm.bh * dm.t == 0)
                       return std::vector<Tensor>{zeros(in.shape(), in.dtype(), in.device())};
                     Tensor d = Tensor::empty(in.shape(), in.dtype(), in.device(), gop);
                     attention_grad_into({d, d, d}, g, in, in, in, out, lse, causal, dm, site, lay);
                     return std::vector<Tensor>{d};
                   });
  return f.out;
}

}  // namespace tide
