// matmul, linear, one-hot rows, transpose and the row-wise softmax / log_softmax: checks,
// shapes and gradients over the linear-algebra kernel entries (ops/linalg_kernels.h).
#include "ops/linalg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/matmul_precision.h"
#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/checkpoint_keep.h"
#include "ops/elementwise.h"
#include "ops/half_compute.h"
#include "ops/kernel_entry.h"
#include "ops/linalg_kernels.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tide {

using namespace detail;
using Grads = std::vector<Tensor>;

namespace {

// Whether a GEMM of T queued now on `d` may use TF32 (core/matmul_precision.h): float32 on a
// GPU only (the CPU computes in full precision; its entry emulates TF32 for the host-kernel
// fake GPU, which reaches it with the flag set).
template <class T>
bool tf32_now(Device d) {
  return std::is_same_v<T, float> && !d.is_cpu() &&
         float32_matmul_precision() == MatmulPrecision::high;
}

// cblas_?gemm takes int sizes (and the plan cache and heuristics of cuBLASLt are only
// exercised with them): a product whose sizes or row strides pass 2^31 - 1 is refused at
// the call, before its output is allocated. Splitting it into int-sized GEMMs is not
// implemented; the one rule keeps the CPU and the GPU alike.
// (A template on `desc`, not a std::function: this runs on every matmul's enqueue path,
// which allocates nothing in steady state.)
template <class Desc>
void check_blas_sizes(const char* op, std::initializer_list<std::pair<const char*, int64_t>> sizes,
                      const Desc& desc) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const auto& [name, v] : sizes)
    TIDE_CHECK(v <= kMax, op, name, " = ", v,
               " exceeds the 32-bit dimension limit of BLAS: ", desc(),
               " (every dimension and row stride must be at most ", kMax, ")");
}

// A GEMM's output (and, given `second`, a second one of its shape there): those a
// checkpoint's recompute kept for it (ops/checkpoint_keep.h; `reused` set: queue nothing), or
// fresh ones of `like`'s dtype and device.
Tensor gemm_output(OpId id, int64_t k, const Shape& shape, const Tensor& like, bool& reused,
                   Tensor* second = nullptr) {
  const size_t outs = second ? 2 : 1;
  if (KeepTape::active())
    if (std::vector<Tensor> kept = KeepTape::reuse(id, k, std::vector<Shape>(outs, shape),
                                                   std::vector<DType>(outs, like.dtype()));
        !kept.empty()) {
      reused = true;
      if (second) *second = kept[1];
      return kept[0];
    }
  reused = false;
  if (second) *second = Tensor::empty(shape, like.dtype(), like.device(), op_name(id));
  return Tensor::empty(shape, like.dtype(), like.device(), op_name(id));
}

// One batch dimension of a batched product: the output's extent and each operand's stride
// (elements; 0 where it broadcasts).
struct BatchDim {
  int64_t size, sa, sb;
};

// (..., m, k) @ (..., k, n) with NumPy broadcasting of the batch dimensions, on one
// kernel entry and no copies: b 2-D and a not transposed is one GEMM over a's rows;
// otherwise the batch dimensions are merged where their strides allow into at most two
// loops of GEMMs (GemmBatch).
Tensor matmul_batched(const Tensor& a, const Tensor& b, MatmulOptions opt, Site site) {
  const char* op = op_name(OpId::matmul);
  auto desc = [&] {
    return describe(a) + (opt.trans_a ? "^T" : "") + " @ " + describe(b) +
           (opt.trans_b ? "^T" : "");
  };
  TIDE_CHECK(a.ndim() >= 2 && b.ndim() >= 2, op,
             "needs tensors of rank >= 2 (..., rows, columns), got ", desc());
  const Shape &as = a.shape(), &bs = b.shape();
  const int ra = as.ndim(), rb = bs.ndim();
  const int64_t m = opt.trans_a ? as[ra - 1] : as[ra - 2],
                k = opt.trans_a ? as[ra - 2] : as[ra - 1];
  const int64_t kb = opt.trans_b ? bs[rb - 1] : bs[rb - 2],
                n = opt.trans_b ? bs[rb - 2] : bs[rb - 1];
  TIDE_CHECK(k == kb, op, "inner dimensions differ: ", desc());
  // The batch dimensions, right-aligned; strides of the contiguous operands.
  const int nb = std::max(ra, rb) - 2;
  std::vector<int64_t> out_dims(size_t(nb + 2));
  std::vector<BatchDim> dims(static_cast<size_t>(nb));
  int64_t stride_a = as[ra - 1] * as[ra - 2], stride_b = bs[rb - 1] * bs[rb - 2], batches = 1;
  for (int i = nb - 1; i >= 0; --i) {
    const int ia = i - (nb - (ra - 2)), ib = i - (nb - (rb - 2));
    const int64_t ea = ia >= 0 ? as[ia] : 1, eb = ib >= 0 ? bs[ib] : 1;
    TIDE_CHECK(ea == eb || ea == 1 || eb == 1, op, "batch dimensions do not broadcast: ", desc());
    const int64_t e = ea == 1 ? eb : ea;
    dims[size_t(i)] = {e, ea == 1 ? 0 : stride_a, eb == 1 ? 0 : stride_b};
    stride_a *= ea;
    stride_b *= eb;
    out_dims[size_t(i)] = e;
    batches *= e;
  }
  out_dims[size_t(nb)] = m;
  out_dims[size_t(nb + 1)] = n;
  const bool fold = rb == 2 && !opt.trans_a;  // a's batches are rows of one GEMM
  const int64_t lda = std::max<int64_t>(1, as[ra - 1]), ldb = std::max<int64_t>(1, bs[rb - 1]);
  const int64_t ldc = std::max<int64_t>(1, n), rows = fold ? batches * m : m;
  if (rows > 0 && n > 0)
    check_blas_sizes(op,
                     {{"m", rows},
                      {"n", n},
                      {"k", k},
                      {"lda", lda},
                      {"ldb", ldb},
                      {"ldc", ldc},
                      {"the batch count", batches}},
                     desc);
  // Merge each dimension into the one inside it when both operands step evenly across
  // them (broadcast ones included); extent-1 dimensions drop out.
  std::vector<BatchDim> merged;
  for (const BatchDim& d : dims) {
    if (d.size == 1) continue;
    if (!merged.empty()) {
      BatchDim& o = merged.back();
      // o is outside d: merge when o's strides are d's times d's extent.
      if (o.sa == d.sa * d.size && o.sb == d.sb * d.size) {
        o = {o.size * d.size, d.sa, d.sb};
        continue;
      }
    }
    merged.push_back(d);
  }
  TIDE_CHECK(fold || merged.size() <= 2, op,
             "batch dimensions that broadcast in more than two separate groups are not "
             "supported: ",
             desc(), " (reshape or expand first)");
  bool reused;  // inside a checkpoint's recompute, a kept output replaces the GEMM
  Tensor y = gemm_output(OpId::matmul, k, Shape(out_dims), a, reused);
  if (y.numel() > 0 && !reused)
    dispatch_floating_with_half(a.dtype(), [&](auto z) {
      using T = decltype(z);
      const kernels::Gemm<T> g{a.ref<T>(), b.ref<T>(),  y.ref<T>(),  rows,
                               n,          k,           lda,         ldb,
                               ldc,        opt.trans_a, opt.trans_b, tf32_now<T>(a.device())};
      if (fold || merged.empty()) {
        kernels::queue(OpId::matmul, a.device(), {a.storage(), b.storage()}, {y.storage()},
                       &kernels::cpu::gemm<T>, g, kernels::NoExtra{}, site);
        return;
      }
      kernels::GemmBatch bt;
      const BatchDim& in = merged.back();
      bt.count = in.size, bt.stride_a = in.sa, bt.stride_b = in.sb;
      if (merged.size() == 2)
        bt.outer = merged[0].size, bt.outer_a = merged[0].sa, bt.outer_b = merged[0].sb;
      kernels::queue(OpId::matmul, a.device(), {a.storage(), b.storage()}, {y.storage()},
                     &kernels::cpu::gemm_batched<T>, g, bt, site);
    });
  if (KeepTape::active()) KeepTape::produced(OpId::matmul, k, {y});
  // The gradient of a broadcast operand sums over the batches it was broadcast to.
  const bool need_a = autograd::needs_grad({&a}), need_b = autograd::needs_grad({&b});
  autograd::record(op, y, {&a, &b},
                   [a = a.detach(), b = b.detach(), opt, need_a, need_b](const Tensor& g) {
                     const bool ta = opt.trans_a, tb = opt.trans_b;
                     Tensor ga, gb;
                     if (need_a) {
                       ga = ta ? matmul(b, g, {tb, true}) : matmul(g, b, {false, !tb});
                       if (ga.shape() != a.shape()) ga = sum_to(ga, a.shape());
                     }
                     if (need_b) {
                       if (b.ndim() == 2 && !ta) {
                         // One GEMM over all of a's rows instead of a batch then a sum.
                         const int64_t ka = a.size(a.ndim() - 1), n = g.size(g.ndim() - 1);
                         const Tensor a2 = a.reshape({-1, ka}), g2 = g.reshape({-1, n});
                         gb = tb ? matmul(g2, a2, {true, false}) : matmul(a2, g2, {true, false});
                       } else {
                         gb = tb ? matmul(g, a, {true, ta}) : matmul(a, g, {!ta, false});
                         if (gb.shape() != b.shape()) gb = sum_to(gb, b.shape());
                       }
                     }
                     return Grads{ga, gb};
                   });
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions opt, Site site) {
  // Autocast (ops/autocast.h): GEMMs run in the low dtype.
  if (Tensor la = a, lb = b; autocast::lower({&la, &lb}, site)) return matmul(la, lb, opt, site);
  const char* op = op_name(OpId::matmul);
  check_same(a, b, OpId::matmul);
  check_floating(a, op);
  if (a.ndim() != 2 || b.ndim() != 2) [[unlikely]]
    return matmul_batched(a, b, opt, site);
  auto desc = [&] {
    return describe(a) + (opt.trans_a ? "^T" : "") + " @ " + describe(b) +
           (opt.trans_b ? "^T" : "");
  };
  int64_t m = opt.trans_a ? a.shape()[1] : a.shape()[0];
  int64_t k = opt.trans_a ? a.shape()[0] : a.shape()[1];
  int64_t kb = opt.trans_b ? b.shape()[1] : b.shape()[0];
  int64_t n = opt.trans_b ? b.shape()[0] : b.shape()[1];
  TIDE_CHECK(k == kb, op, "inner dimensions differ: ", desc());
  int64_t lda = std::max<int64_t>(1, a.shape()[1]);
  int64_t ldb = std::max<int64_t>(1, b.shape()[1]);
  int64_t ldc = std::max<int64_t>(1, n);
  // An empty output computes nothing: no GEMM, no limit.
  if (m > 0 && n > 0)
    check_blas_sizes(op, {{"m", m}, {"n", n}, {"k", k}, {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}},
                     desc);
  bool reused;
  Tensor y = gemm_output(OpId::matmul, k, Shape{m, n}, a, reused);
  if (m * n > 0 && !reused) {
    dispatch_floating_with_half(a.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(OpId::matmul, a.device(), {a.storage(), b.storage()}, {y.storage()},
                     &kernels::cpu::gemm<T>,
                     kernels::Gemm<T>{a.ref<T>(), b.ref<T>(), y.ref<T>(), m, n, k, lda, ldb, ldc,
                                      opt.trans_a, opt.trans_b, tf32_now<T>(a.device())},
                     kernels::NoExtra{}, site);
    });
  }
  if (KeepTape::active()) KeepTape::produced(OpId::matmul, k, {y});
  // Only the gradients an input needs: for x @ W with a data batch x, dx would be a whole
  // extra GEMM that backward() then drops.
  bool need_a = autograd::needs_grad({&a}), need_b = autograd::needs_grad({&b});
  autograd::record(op, y, {&a, &b},
                   [a = a.detach(), b = b.detach(), opt, need_a, need_b](const Tensor& g) {
                     bool ta = opt.trans_a, tb = opt.trans_b;
                     Tensor ga, gb;  // undefined: no gradient
                     if (need_a) ga = ta ? matmul(b, g, {tb, true}) : matmul(g, b, {false, !tb});
                     if (need_b) gb = tb ? matmul(g, a, {true, ta}) : matmul(a, g, {!ta, false});
                     return Grads{ga, gb};
                   });
  return y;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Site site) {
  return linear(x, w, b, relu ? Activation::relu : Activation::none, site);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act, Site site) {
  if (Tensor lx = x, lw = w, lb = b; autocast::lower({&lx, &lw, &lb}, site))
    return linear(lx, lw, lb, act, site);
  const OpId id = OpId::linear;
  const char* op = op_name(id);
  check_same(x, w, id);
  check_same(x, b, id);
  check_floating(x, op);
  TIDE_CHECK(x.ndim() == 2 && w.ndim() == 2 && b.ndim() == 1 && x.size(1) == w.size(0) &&
                 b.size(0) == w.size(1),
             op, "expected x (N, K) @ w (K, M) + b (M,), got ", describe(x), " @ ", describe(w),
             " + ", describe(b));
  const int64_t m = x.size(0), k = x.size(1), n = w.size(1);
  if (m > 0 && n > 0)
    check_blas_sizes(op, {{"N", m}, {"K", k}, {"M", n}},
                     [&] { return describe(x) + " @ " + describe(w) + " + " + describe(b); });
  const bool gelu = act == Activation::gelu_tanh;
  // With GELU, two outputs: y and pre = x @ w + b, which the gradient reads.
  bool reused;
  Tensor pre;
  Tensor y = gemm_output(id, k, Shape{m, n}, x, reused, gelu ? &pre : nullptr);
  if (m * n > 0 && !reused)
    dispatch_floating_with_half(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::Gemm<T> g{x.ref<T>(),
                         w.ref<T>(),
                         y.ref<T>(),
                         m,
                         n,
                         k,
                         std::max<int64_t>(1, k),
                         std::max<int64_t>(1, n),
                         std::max<int64_t>(1, n),
                         false,
                         false,
                         tf32_now<T>(x.device())};
      const kernels::LinearAct ka = act == Activation::relu        ? kernels::LinearAct::relu
                                    : act == Activation::gelu_tanh ? kernels::LinearAct::gelu_tanh
                                                                   : kernels::LinearAct::none;
      const kernels::GemmBias<T> gb{g, b.ref<T>(), ka, gelu ? pre.ref<T>() : DataRef<T>{}};
      if (gelu)
        kernels::queue(id, x.device(), {x.storage(), w.storage(), b.storage()},
                       {y.storage(), pre.storage()}, &kernels::cpu::gemm_bias<T>, gb,
                       kernels::NoExtra{}, site);
      else
        kernels::queue(id, x.device(), {x.storage(), w.storage(), b.storage()}, {y.storage()},
                       &kernels::cpu::gemm_bias<T>, gb, kernels::NoExtra{}, site);
    });
  if (KeepTape::active())
    KeepTape::produced(id, k, gelu ? std::vector<Tensor>{y, pre} : std::vector<Tensor>{y});
  bool need_x = autograd::needs_grad({&x}), need_w = autograd::needs_grad({&w});
  // ReLU's gradient reads y (> 0 exactly where x@w+b > 0), GELU's x@w+b.
  const Tensor kept = gelu ? pre.detach() : act == Activation::relu ? y.detach() : Tensor{};
  autograd::record(op, y, {&x, &w, &b},
                   [x = x.detach(), w = w.detach(), kept, act, need_x, need_w](const Tensor& g) {
                     Tensor gy = act == Activation::relu ? relu_grad(g, kept)
                                 : act == Activation::gelu_tanh
                                     ? gelu_grad(g, kept, GeluApprox::tanh)
                                     : g;
                     Tensor gx, gw;
                     if (need_x) gx = matmul(gy, w, {false, true});
                     if (need_w) gw = matmul(x, gy, {true, false});
                     return Grads{gx, gw, sum(gy, 0)};
                   });
  return y;
}

Tensor one_hot(const Tensor& labels, int64_t classes, DType dtype, const char* op, Site site) {
  check_defined(labels, op);
  check_supported(labels, OpId::one_hot);
  TIDE_CHECK(labels.ndim() == 1 && !is_floating(labels.dtype()), op,
             "labels must be (N) int32 or int64, got ", describe(labels));
  TIDE_CHECK(classes >= 1, op, "needs at least one class, got ", classes);
  TIDE_CHECK(is_floating(dtype), op, "one-hot rows need a floating dtype, got ", dtype);
  if (is_half(dtype)) throw_half_unsupported(dtype, op);
  const int64_t n = labels.size(0);
  Tensor y = Tensor::empty({n, classes}, dtype, labels.device(), op);
  if (n == 0) return y;
  dispatch_floating(dtype, [&](auto z) {
    using T = decltype(z);
    auto run = [&](auto zl) {
      using L = decltype(zl);
      kernels::queue(OpId::one_hot, labels.device(), {labels.storage()}, {y.storage()},
                     &kernels::cpu::one_hot_rows<T, L>,
                     kernels::OneHotRows<T, L>{labels.ref<L>(), y.ref<T>(), n, classes},
                     kernels::NoExtra{}, site, op);
    };
    if (labels.dtype() == DType::int32) run(int32_t{});
    else run(int64_t{});
  });
  return y;
}

namespace {
// The gradient of cross_entropy_rows: one queued kernel (no graph of its own).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                              const Tensor& g, const char* op, Site site) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), logits.device(), op);
  dispatch_floating_with_half(logits.dtype(), [&](auto z) {
    using T = decltype(z);
    auto run = [&](auto zl) {
      using L = decltype(zl);
      kernels::queue(
          OpId::cross_entropy_grad, logits.device(),
          {logits.storage(), lse.storage(), g.storage(), labels.storage()}, {dx.storage()},
          &kernels::cpu::cross_entropy_grad<T, L>,
          kernels::CrossEntropyGrad<T, L>{logits.ref<T>(), lse.ref<compute_t<T>>(), g.ref<T>(),
                                          labels.ref<L>(), dx.ref<T>(), n, c},
          kernels::NoExtra{}, site, op);
    };
    if (labels.dtype() == DType::int32) run(int32_t{});
    else run(int64_t{});
  });
  return dx;
}
}  // namespace

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& labels, const char* op, Site site) {
  if (Tensor f = logits; autocast::raise({&f}, site))
    return cross_entropy_rows(f, labels, op, site);
  check_defined(logits, op);
  check_defined(labels, op);
  check_supported(logits, OpId::cross_entropy);
  TIDE_CHECK(logits.ndim() == 2, op, "logits must be (N, C), got ", describe(logits));
  check_floating(logits, op);
  TIDE_CHECK(labels.ndim() == 1 && !is_floating(labels.dtype()), op,
             "labels must be (N) int32 or int64, got ", describe(labels));
  const int64_t n = logits.size(0), c = logits.size(1);
  TIDE_CHECK(labels.size(0) == n, op, "logits ", logits.shape(), " and labels ", labels.shape(),
             " disagree on N");
  TIDE_CHECK(n > 0 && c > 0, op, "empty logits ", logits.shape());
  TIDE_CHECK(labels.device() == logits.device(), op, "logits on ", logits.device().str(),
             " and labels on ", labels.device().str());
  Tensor loss = Tensor::empty({n}, logits.dtype(), logits.device(), op);
  // 16-bit logits keep their log-sum-exp in float32, as the float32 path does.
  const DType lse_dtype = is_half(logits.dtype()) ? DType::float32 : logits.dtype();
  Tensor lse = Tensor::empty({n}, lse_dtype, logits.device(), op);
  dispatch_floating_with_half(logits.dtype(), [&](auto z) {
    using T = decltype(z);
    auto run = [&](auto zl) {
      using L = decltype(zl);
      kernels::queue(OpId::cross_entropy, logits.device(), {logits.storage(), labels.storage()},
                     {loss.storage(), lse.storage()}, &kernels::cpu::cross_entropy_rows<T, L>,
                     kernels::CrossEntropyRows<T, L>{logits.ref<T>(), labels.ref<L>(),
                                                     loss.ref<T>(), lse.ref<compute_t<T>>(), n, c},
                     kernels::NoExtra{}, site, op);
    };
    if (labels.dtype() == DType::int32) run(int32_t{});
    else run(int64_t{});
  });
  autograd::record(OpId::cross_entropy, loss, {&logits},
                   [x = logits.detach(), labels, lse, op, site](const Tensor& g) {
                     return Grads{cross_entropy_backward(x, labels, lse, g, op, site)};
                   });
  return loss;
}

Tensor swap_axes(const Tensor& a, int64_t dim0, int64_t dim1, Site site) {
  const char* op = op_name(OpId::swap_axes);
  check_defined(a, op);
  check_supported(a, OpId::swap_axes);
  const int64_t nd = a.ndim();
  TIDE_CHECK(dim0 >= -nd && dim0 < nd && dim1 >= -nd && dim1 < nd, op, "dims (", dim0, ", ", dim1,
             ") are outside [", -nd, ", ", nd, ") for ", describe(a));
  int64_t d0 = dim0 < 0 ? dim0 + nd : dim0, d1 = dim1 < 0 ? dim1 + nd : dim1;
  if (d0 > d1) std::swap(d0, d1);
  const Shape& s = a.shape();
  Shape out = s;
  std::swap(out[int(d0)], out[int(d1)]);
  Tensor y = Tensor::empty(out, a.dtype(), a.device(), op);
  auto prod = [&](int64_t from, int64_t to) {
    int64_t p = 1;
    for (int64_t i = from; i < to; ++i) p *= s[int(i)];
    return p;
  };
  if (a.numel() > 0)
    dispatch_storage(a.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(OpId::swap_axes, a.device(), {a.storage()}, {y.storage()},
                     &kernels::cpu::swap_axes<T>,
                     d0 == d1  // a plain copy: one run of every element
                         ? kernels::SwapAxes<T>{a.ref<T>(), y.ref<T>(), 1, 1, 1, 1, a.numel()}
                         : kernels::SwapAxes<T>{a.ref<T>(), y.ref<T>(), prod(0, d0), s[int(d0)],
                                                prod(d0 + 1, d1), s[int(d1)], prod(d1 + 1, nd)},
                     kernels::NoExtra{}, site);
    });
  autograd::record(op, y, {&a}, [d0, d1](const Tensor& g) { return Grads{swap_axes(g, d0, d1)}; });
  return y;
}

Tensor transpose(const Tensor& a, Site site) {
  const char* op = op_name(OpId::transpose);
  check_defined(a, op);
  check_supported(a, OpId::transpose);
  TIDE_CHECK(a.ndim() == 2, op, "needs a 2-D tensor, got ", describe(a));
  int64_t r = a.shape()[0], c = a.shape()[1];
  Tensor y = Tensor::empty({c, r}, a.dtype(), a.device(), op);
  if (r * c > 0)
    dispatch_storage(a.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(OpId::transpose, a.device(), {a.storage()}, {y.storage()},
                     &kernels::cpu::transpose<T>,
                     kernels::Transpose<T>{a.ref<T>(), y.ref<T>(), r, c}, kernels::NoExtra{}, site);
    });
  autograd::record(op, y, {&a}, [](const Tensor& g) { return Grads{transpose(g)}; });
  return y;
}

namespace {
Tensor softmax_impl(const Tensor& a, bool log_out, Site site) {
  OpId id = log_out ? OpId::log_softmax : OpId::softmax;
  const char* op = op_name(id);
  check_defined(a, op);
  check_supported(a, id);
  check_floating(a, op);
  TIDE_CHECK(a.ndim() >= 1, op, "needs rank >= 1, got a 0-d tensor");
  int64_t n = a.shape()[a.ndim() - 1];
  int64_t rows = n ? a.numel() / n : 0;
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device(), op);
  if (rows * n > 0) {
    dispatch_floating_with_half(a.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::queue(id, a.device(), {a.storage()}, {y.storage()}, &kernels::cpu::softmax_rows<T>,
                     kernels::SoftmaxRows<T>{a.ref<T>(), y.ref<T>(), rows, n, log_out},
                     kernels::NoExtra{}, site);
    });
  }
  return y;
}

// A float32 gradient rounded to a 16-bit output's dtype (other dtypes: as it is).
Tensor to_dtype_of(const Tensor& g, const Tensor& y) {
  return is_half(y.dtype()) ? cast(g, y.dtype()) : g;
}
}  // namespace

// 16-bit rows run their own kernel (load 16-bit, compute in float, store 16-bit); the
// gradient is computed in float32 from the 16-bit output and rounded once.
Tensor softmax(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return softmax(f, site);
  Tensor y = softmax_impl(a, false, site);
  autograd::record(OpId::softmax, y, {&a}, [y = y.detach()](const Tensor& g) {
    const Tensor fy = detail::up(y), fg = detail::up(g);
    return Grads{to_dtype_of(fy * (fg - sum(fg * fy, -1, true)), y)};
  });
  return y;
}

Tensor log_softmax(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return log_softmax(f, site);
  Tensor y = softmax_impl(a, true, site);
  autograd::record(OpId::log_softmax, y, {&a}, [y = y.detach()](const Tensor& g) {
    const Tensor fy = detail::up(y), fg = detail::up(g);
    return Grads{to_dtype_of(fg - exp(fy) * sum(fg, -1, true), y)};
  });
  return y;
}

}  // namespace tide
