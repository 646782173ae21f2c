// Elementwise ops: front-ends (checks, broadcast, output allocation, autograd) that queue
// the family's kernel entries (ops/elementwise_kernels.h) with the functors of functors.h.
#include "ops/elementwise.h"

#include <charconv>
#include <cmath>
#include <string>

#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/checkpoint_keep.h"
#include "ops/creation.h"
#include "ops/creation_kernels.h"
#include "ops/elementwise_desc.h"
#include "ops/elementwise_kernels.h"
#include "ops/functors.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"
#include "ops/reduce.h"

namespace tide {

namespace detail {

std::string format_scalar(double s) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, s);
  return std::string(buf, r.ptr);
}

void check_scalar_fits(double s, DType dtype, const char* op, const char* what, bool integral,
                       const std::string& context) {
  if (is_floating(dtype)) return;
  TIDE_CHECK(std::isfinite(s), op, what, " ", format_scalar(s), " is not finite", context);
  // int32: [-2^31, 2^31 - 1], both exact doubles. int64: [-2^63, 2^63 - 1]; no double lies
  // between 2^63 - 1024 and 2^63, so s < 2^63 is the upper bound.
  const bool fits =
      dtype == DType::int32 ? s >= -0x1p31 && s <= 0x1p31 - 1 : s >= -0x1p63 && s < 0x1p63;
  TIDE_CHECK(fits, op, what, " ", format_scalar(s), " is outside the range of ", dtype,
             dtype == DType::int32 ? " [-2147483648, 2147483647]"
                                   : " [-9223372036854775808, 9223372036854775807]",
             context);
  TIDE_CHECK(!integral || s == std::trunc(s), op, what, " ", format_scalar(s), " is not an integer",
             context);
}

}  // namespace detail

using namespace detail;
using Grads = std::vector<Tensor>;

namespace {

DType mask_dtype(DType t) { return is_floating(t) ? t : DType::float32; }

// While a trace records (c = capturing()), describes a flat op for the fusion pass
// (ops/elementwise_desc.h). Callers test capturing() first and build the operands only
// then: built on every eager op, their stores stalled the loads that passed them on
// (store forwarding), ~10% of a tiny op's enqueue.
template <class O, class T, class F>
[[gnu::noinline]] void describe_flat(CaptureSink* c, OpId id, F f, EwOperand a, EwOperand b,
                                     DataRef<O> out, int64_t n) {
  constexpr int arity = std::is_invocable_v<F, compute_t<T>, compute_t<T>> ? 2 : 1;
  ElementwiseDesc d;
  d.id = id;
  d.arity = arity;
  d.in = dtype_v<T>;
  d.out = dtype_v<O>;
  d.n = n;
  d.a = a;
  d.b = b;
  d.out_storage = out.s;
  d.out_offset = out.offset;
  static_assert(kernels::FunctorIdOf<F>::value != kernels::FunctorId::count_,
                "a flat elementwise functor missing from ops/functors.h's lists");
  d.functor_id = kernels::FunctorIdOf<F>::value;
  store_functor(d, f);
  c->describe_next(&d, sizeof(d));
}

// Queues out = f(a, b), a and b broadcast to out's shape; out's dtype is
// fn::binary_out_t<F, T> (masks of integers are float).
template <class F>
void queue_binary(OpId id, F f, const Tensor& a, const Tensor& b, const Tensor& out, Site site) {
  dispatch_with_half(a.dtype(), [&](auto za) {
    using T = decltype(za);
    using O = fn::binary_out_t<F, T>;
    DataRef<T> ra = a.ref<T>(), rb = b.ref<T>();
    DataRef<O> ro = out.ref<O>();
    int64_t n = out.numel(), na = a.numel(), nb = b.numel();
    if ((na == n || na == 1) && (nb == n || nb == 1)) {
      int64_t sa = na == n ? 1 : 0, sb = nb == n ? 1 : 0;
      if (CaptureSink* c = capturing()) [[unlikely]]
        describe_flat<O, T>(c, id, f, tensor_operand(ra, sa), tensor_operand(rb, sb), ro, n);
      kernels::queue(id, out.device(), {a.storage(), b.storage()}, {out.storage()},
                     &kernels::cpu::binary_flat<O, T, F>,
                     kernels::BinaryFlat<O, T>{ra, rb, ro, n, sa, sb}, f, site);
    } else {
      kernels::queue(id, out.device(), {a.storage(), b.storage()}, {out.storage()},
                     &kernels::cpu::binary_broadcast<O, T, F>,
                     kernels::BinaryBroadcast<O, T>{
                         ra, rb, ro, kernels::make_geometry(a.shape(), b.shape(), out.shape())},
                     f, site);
    }
  });
}

// Queues out = f(a, s) (or f(s, a) when scalar_first) for a contiguous a.
template <class F>
void queue_scalar(OpId id, F f, const Tensor& a, double s, bool scalar_first, const Tensor& out,
                  Site site) {
  dispatch_with_half(a.dtype(), [&](auto za) {
    using T = decltype(za);
    using O = fn::binary_out_t<F, T>;
    DataRef<T> ra = a.ref<T>();
    DataRef<O> ro = out.ref<O>();
    int64_t n = out.numel();
    const compute_t<T> sv = compute_t<T>(s);
    // A 16-bit tensor's scalar is a float, which a fused chain would read as a 16-bit value:
    // such nodes stay out of chains (the tensor operands' 16-bit nodes join them).
    if constexpr (!is_half_v<T>) {
      if (CaptureSink* c = capturing()) [[unlikely]] {
        if (scalar_first)
          describe_flat<O, T>(c, id, f, scalar_operand(sv), tensor_operand(ra, 1), ro, n);
        else describe_flat<O, T>(c, id, f, tensor_operand(ra, 1), scalar_operand(sv), ro, n);
      }
    }
    kernels::queue(id, out.device(), {a.storage()}, {out.storage()},
                   &kernels::cpu::scalar_flat<O, T, F>,
                   kernels::ScalarFlat<O, T>{ra, ro, n, sv, scalar_first}, f, site);
  });
}

template <class F>
void queue_unary(OpId id, F f, const Tensor& a, const Tensor& out, Site site) {
  dispatch_with_half(a.dtype(), [&](auto za) {
    using T = decltype(za);
    DataRef<T> ra = a.ref<T>(), ro = out.ref<T>();
    int64_t n = out.numel();
    if (CaptureSink* c = capturing()) [[unlikely]]
      describe_flat<T, T>(c, id, f, tensor_operand(ra, 1), EwOperand{}, ro, n);
    kernels::queue(id, out.device(), {a.storage()}, {out.storage()},
                   &kernels::cpu::unary_flat<T, F>, kernels::UnaryFlat<T>{ra, ro, n}, f, site);
  });
}

template <class F>
Tensor binary_op(OpId id, F f, const Tensor& a, const Tensor& b, Site site) {
  const char* op = op_name(id);
  check_same(a, b, id);
  const OpTraits& t = op_traits(id);
  if (t.floating_only) check_floating(a, op);
  Shape s = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor y = Tensor::empty(s, t.mask ? mask_dtype(a.dtype()) : a.dtype(), a.device(), op);
  queue_binary(id, f, a, b, y, site);
  return y;
}

// What an error about a scalar adds for an integer tensor a.
std::string for_tensor(const Tensor& a) {
  return ", for a tensor of " + describe(a) + "; cast the tensor to a floating dtype first";
}

template <class F>
Tensor scalar_op(OpId id, F f, const Tensor& a, double s, bool scalar_first, Site site) {
  const char* op = op_name(id);
  check_defined(a, op);
  check_supported(a, id);
  const OpTraits& t = op_traits(id);
  if (t.floating_only) check_floating(a, op);
  // The kernel computes in a's dtype: an integer tensor needs a scalar it holds (its
  // conversion is undefined otherwise). In range, ceil / floor below stay in range.
  if (!is_floating(a.dtype()))
    check_scalar_fits(s, a.dtype(), op, "scalar", !t.mask, for_tensor(a));
  Tensor y = Tensor::empty(a.shape(), t.mask ? mask_dtype(a.dtype()) : a.dtype(), a.device(), op);
  if (!is_floating(a.dtype()) && s != std::floor(s)) {
    // An integer tensor against a fractional scalar (arithmetic refused it above):
    // comparisons keep their meaning (x < 0.5 is x < 1; x > -0.5 is x > -1; x == 0.5
    // never holds).
    if (id == OpId::lt) queue_scalar(id, f, a, std::ceil(s), scalar_first, y, site);
    else if (id == OpId::gt) queue_scalar(id, f, a, std::floor(s), scalar_first, y, site);
    else queue_scalar(id, fn::Never{}, a, 0.0, scalar_first, y, site);
    return y;
  }
  queue_scalar(id, f, a, s, scalar_first, y, site);
  return y;
}

template <class F>
Tensor unary_op(OpId id, F f, const Tensor& a, Site site) {
  const char* op = op_name(id);
  check_defined(a, op);
  check_supported(a, id);
  if (op_traits(id).floating_only) check_floating(a, op);
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device(), op);
  queue_unary(id, f, a, y, site);
  return y;
}

// 1 where a >= b (the side maximum takes on ties), else 0.
Tensor ge_mask(const Tensor& a, const Tensor& b) { return rsub(1.0, lt(a, b)); }

}  // namespace

// ---- binary ----------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, Site site) {
  // Autocast (ops/autocast.h): two floating dtypes meet at the wider, before the node.
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return add(pa, pb, site);
  Tensor y = binary_op(OpId::add, fn::Add{}, a, b, site);
  autograd::record(OpId::add, y, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return Grads{sum_to(g, sa), sum_to(g, sb)};
  });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return sub(pa, pb, site);
  Tensor y = binary_op(OpId::sub, fn::Sub{}, a, b, site);
  autograd::record(OpId::sub, y, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return Grads{sum_to(g, sa), sum_to(neg(g), sb)};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return mul(pa, pb, site);
  Tensor y = binary_op(OpId::mul, fn::Mul{}, a, b, site);
  autograd::record(OpId::mul, y, {&a, &b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    return Grads{sum_to(g * b, a.shape()), sum_to(g * a, b.shape())};
  });
  return y;
}

Tensor div(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return div(pa, pb, site);
  Tensor y = binary_op(OpId::div, fn::Div{}, a, b, site);
  autograd::record(OpId::div, y, {&a, &b},
                   [sa = a.shape(), b = b.detach(), y = y.detach()](const Tensor& g) {
                     Tensor ga = g / b;
                     return Grads{sum_to(ga, sa), sum_to(neg(ga * y), b.shape())};
                   });
  return y;
}

Tensor maximum(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return maximum(pa, pb, site);
  Tensor y = binary_op(OpId::maximum, fn::Maximum{}, a, b, site);
  autograd::record(OpId::maximum, y, {&a, &b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    Tensor m = ge_mask(a, b);
    return Grads{sum_to(g * m, a.shape()), sum_to(g * rsub(1.0, m), b.shape())};
  });
  return y;
}

Tensor eq(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return eq(pa, pb, site);
  return binary_op(OpId::eq, fn::Eq{}, a, b, site);
}
Tensor gt(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return gt(pa, pb, site);
  return binary_op(OpId::gt, fn::Gt{}, a, b, site);
}
Tensor lt(const Tensor& a, const Tensor& b, Site site) {
  if (Tensor pa = a, pb = b; autocast::promote(pa, pb, site)) return lt(pa, pb, site);
  return binary_op(OpId::lt, fn::Lt{}, a, b, site);
}

// ---- tensor-scalar ---------------------------------------------------------------------

Tensor add(const Tensor& a, double s, Site site) {
  Tensor y = scalar_op(OpId::add, fn::Add{}, a, s, false, site);
  autograd::record(OpId::add, y, {&a}, [](const Tensor& g) { return Grads{g}; });
  return y;
}
Tensor sub(const Tensor& a, double s, Site site) {
  Tensor y = scalar_op(OpId::sub, fn::Sub{}, a, s, false, site);
  autograd::record(OpId::sub, y, {&a}, [](const Tensor& g) { return Grads{g}; });
  return y;
}
Tensor rsub(double s, const Tensor& a, Site site) {
  Tensor y = scalar_op(OpId::sub, fn::Sub{}, a, s, true, site);
  autograd::record(OpId::sub, y, {&a}, [](const Tensor& g) { return Grads{neg(g)}; });
  return y;
}
Tensor mul(const Tensor& a, double s, Site site) {
  Tensor y = scalar_op(OpId::mul, fn::Mul{}, a, s, false, site);
  autograd::record(OpId::mul, y, {&a}, [s](const Tensor& g) { return Grads{mul(g, s)}; });
  return y;
}
Tensor div(const Tensor& a, double s, Site site) {
  Tensor y = scalar_op(OpId::div, fn::Div{}, a, s, false, site);
  autograd::record(OpId::div, y, {&a}, [s](const Tensor& g) { return Grads{div(g, s)}; });
  return y;
}
Tensor rdiv(double s, const Tensor& a, Site site) {
  Tensor y = scalar_op(OpId::div, fn::Div{}, a, s, true, site);
  autograd::record(OpId::div, y, {&a}, [a = a.detach(), y = y.detach()](const Tensor& g) {
    return Grads{neg(g * y / a)};
  });
  return y;
}
Tensor maximum(const Tensor& a, double s, Site site) {
  Tensor y = scalar_op(OpId::maximum, fn::Maximum{}, a, s, false, site);
  autograd::record(OpId::maximum, y, {&a},
                   [a = a.detach(), s](const Tensor& g) { return Grads{g * rsub(1.0, lt(a, s))}; });
  return y;
}
Tensor eq(const Tensor& a, double s, Site site) {
  return scalar_op(OpId::eq, fn::Eq{}, a, s, false, site);
}
Tensor gt(const Tensor& a, double s, Site site) {
  return scalar_op(OpId::gt, fn::Gt{}, a, s, false, site);
}
Tensor lt(const Tensor& a, double s, Site site) {
  return scalar_op(OpId::lt, fn::Lt{}, a, s, false, site);
}

// ---- unary -----------------------------------------------------------------------------

Tensor neg(const Tensor& a, Site site) {
  Tensor y = unary_op(OpId::neg, fn::Neg{}, a, site);
  autograd::record(OpId::neg, y, {&a}, [](const Tensor& g) { return Grads{neg(g)}; });
  return y;
}
Tensor exp(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return exp(f, site);
  Tensor y = unary_op(OpId::exp, fn::Exp{}, a, site);
  autograd::record(OpId::exp, y, {&a}, [y = y.detach()](const Tensor& g) { return Grads{g * y}; });
  return y;
}
Tensor log(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return log(f, site);
  Tensor y = unary_op(OpId::log, fn::Log{}, a, site);
  autograd::record(OpId::log, y, {&a}, [a = a.detach()](const Tensor& g) { return Grads{g / a}; });
  return y;
}
Tensor sqrt(const Tensor& a, Site site) {
  Tensor y = unary_op(OpId::sqrt, fn::Sqrt{}, a, site);
  autograd::record(OpId::sqrt, y, {&a},
                   [y = y.detach()](const Tensor& g) { return Grads{g * 0.5 / y}; });
  return y;
}
Tensor abs(const Tensor& a, Site site) {
  Tensor y = unary_op(OpId::abs, fn::Abs{}, a, site);
  autograd::record(OpId::abs, y, {&a}, [a = a.detach()](const Tensor& g) {
    return Grads{g * (gt(a, 0.0) - lt(a, 0.0))};
  });
  return y;
}
Tensor relu(const Tensor& a, Site site) {
  Tensor y = unary_op(OpId::relu, fn::Relu{}, a, site);
  autograd::record(OpId::relu, y, {&a},
                   [a = a.detach()](const Tensor& g) { return Grads{relu_grad(g, a)}; });
  return y;
}
Tensor relu_grad(const Tensor& g, const Tensor& a, Site site) {
  return binary_op(OpId::relu_grad, fn::ReluGrad{}, g, a, site);
}
Tensor sigmoid(const Tensor& a, Site site) {
  Tensor y = unary_op(OpId::sigmoid, fn::Sigmoid{}, a, site);
  autograd::record(OpId::sigmoid, y, {&a},
                   [y = y.detach()](const Tensor& g) { return Grads{g * y * rsub(1.0, y)}; });
  return y;
}
Tensor tanh(const Tensor& a, Site site) {
  Tensor y = unary_op(OpId::tanh, fn::Tanh{}, a, site);
  autograd::record(OpId::tanh, y, {&a},
                   [y = y.detach()](const Tensor& g) { return Grads{g * rsub(1.0, y * y)}; });
  return y;
}
Tensor gelu(const Tensor& a, GeluApprox approx, Site site) {
  const bool exact = approx == GeluApprox::none;
  const OpId id = exact ? OpId::gelu : OpId::gelu_tanh;
  Tensor y = exact ? unary_op(id, fn::GeluErf{}, a, site) : unary_op(id, fn::GeluTanh{}, a, site);
  autograd::record(id, y, {&a}, [a = a.detach(), approx](const Tensor& g) {
    return Grads{gelu_grad(g, a, approx)};
  });
  return y;
}
Tensor gelu_grad(const Tensor& g, const Tensor& a, GeluApprox approx, Site site) {
  if (approx == GeluApprox::none) return binary_op(OpId::gelu_grad, fn::GeluErfGrad{}, g, a, site);
  return binary_op(OpId::gelu_tanh_grad, fn::GeluTanhGrad{}, g, a, site);
}
Tensor pow(const Tensor& a, double p, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return pow(f, p, site);
  Tensor y = unary_op(OpId::pow, fn::Pow{p}, a, site);
  autograd::record(OpId::pow, y, {&a}, [a = a.detach(), p](const Tensor& g) {
    return Grads{g * (pow(a, p - 1.0) * p)};
  });
  return y;
}

// ---- dropout -----------------------------------------------------------------------------

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen, Site site) {
  const char* op = op_name(OpId::dropout);
  check_defined(x, op);
  TIDE_CHECK(p >= 0.0 && p < 1.0, op, "p must be in [0, 1), got ", format_scalar(p), " for ",
             describe(x));
  check_floating(x, op);
  if (!training || p == 0.0) return x;
  // Both kernels' support first: nothing is queued when either is missing.
  check_supported(x, OpId::dropout);
  check_supported(x, OpId::rand);
  Tensor u = rand(x.shape(), x.dtype(), gen, x.device(), site);
  const fn::DropoutKeep keep{p, 1.0 / (1.0 - p)};
  Tensor y = binary_op(OpId::dropout, keep, x, u, site);
  autograd::record(OpId::dropout, y, {&x}, [u, keep](const Tensor& g) {
    return Grads{binary_op(OpId::dropout, keep, g, u, Site::current())};
  });
  return y;
}

// ---- in place ----------------------------------------------------------------------------

namespace {
void check_in_place(const Tensor& self, const Tensor* other, OpId id) {
  const char* op = op_name(id);
  check_defined(self, op);
  check_supported(self, id);
  TIDE_CHECK(!(self.requires_grad() && autograd::grad_enabled()), op,
             "cannot update a tensor that requires grad in place while recording: ", describe(self),
             "; use NoGrad (as optimizers do)");
  // A checkpoint's first run recomputes what it writes over instead of keeping it.
  if (detail::KeepTape::active()) detail::KeepTape::written(self.storage());
  if (!other) return;
  check_same(self, *other, id);
  // An operand overlapping the target (x.add_(x[0])) would read elements already updated.
  bool same_view = other->storage() == self.storage() && other->offset() == self.offset() &&
                   other->shape() == self.shape();
  if (other->storage() == self.storage() && !same_view) {
    int64_t a0 = self.offset(), a1 = a0 + self.numel();
    int64_t b0 = other->offset(), b1 = b0 + other->numel();
    TIDE_CHECK(a1 <= b0 || b1 <= a0 || self.numel() == 0 || other->numel() == 0, op, "the operand ",
               describe(*other), " overlaps the tensor ", describe(self),
               " written in place; clone() it first");
  }
  Shape s = broadcast_shapes(self.shape(), other->shape(), op);
  TIDE_CHECK(s == self.shape(), op, "cannot broadcast ", describe(*other), " into ",
             describe(self));
}

// add_ / sub_ compute a + T(alpha) * b: an integer tensor needs an alpha its dtype holds.
void check_alpha(const Tensor& self, double alpha, OpId id) {
  if (alpha == 1.0 || is_floating(self.dtype())) return;
  const char* op = op_name(id);
  check_scalar_fits(alpha, self.dtype(), op, "alpha", true, for_tensor(self));
  if (id == OpId::sub_)  // computed as a + (-alpha) * b
    check_scalar_fits(-alpha, self.dtype(), op, "-alpha", true, for_tensor(self));
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha, Site site) {
  if (Tensor o = other; autocast::match(*this, o, site)) return add_(o, alpha, site);
  check_in_place(*this, &other, OpId::add_);
  check_alpha(*this, alpha, OpId::add_);
  if (alpha == 1.0) queue_binary(OpId::add_, fn::Add{}, *this, other, *this, site);
  else queue_binary(OpId::add_, fn::AddScaled{alpha}, *this, other, *this, site);
  return *this;
}

Tensor& Tensor::sub_(const Tensor& other, double alpha, Site site) {
  if (Tensor o = other; autocast::match(*this, o, site)) return sub_(o, alpha, site);
  check_in_place(*this, &other, OpId::sub_);
  check_alpha(*this, alpha, OpId::sub_);
  if (alpha == 1.0) queue_binary(OpId::sub_, fn::Sub{}, *this, other, *this, site);
  else queue_binary(OpId::sub_, fn::AddScaled{-alpha}, *this, other, *this, site);
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other, Site site) {
  if (Tensor o = other; autocast::match(*this, o, site)) return mul_(o, site);
  check_in_place(*this, &other, OpId::mul_);
  queue_binary(OpId::mul_, fn::Mul{}, *this, other, *this, site);
  return *this;
}

Tensor& Tensor::mul_(double s, Site site) {
  check_in_place(*this, nullptr, OpId::mul_);
  if (!is_floating(dtype()))
    check_scalar_fits(s, dtype(), op_name(OpId::mul_), "scalar", true, for_tensor(*this));
  queue_scalar(OpId::mul_, fn::Mul{}, *this, s, false, *this, site);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src, Site site) {
  check_in_place(*this, &src, OpId::copy_);
  // Onto every byte its storage was made for, from another storage: the old values do not
  // matter, so the copy replaces a failure of this tensor (core/engine/engine.h, ReplacingWrite).
  const bool whole =
      offset() == 0 && nbytes() == storage()->requested_bytes() && src.storage() != storage();
  ReplacingWrite replacing(whole);
  if (is_half(dtype()) && src.shape() == shape()) {
    // A same-shape 16-bit copy moves the bytes (a broadcast one goes through float, which
    // keeps every bit pattern too).
    if (src.storage() == storage() && src.offset() == offset()) return *this;  // itself
    kernels::queue(OpId::copy_, device(), {src.storage()}, {storage()}, &kernels::cpu::copy_bytes,
                   kernels::CopyBytes{{src.storage(), src.offset() * int64_t(size_of(dtype()))},
                                      {storage(), offset() * int64_t(size_of(dtype()))},
                                      nbytes()},
                   kernels::NoExtra{}, site);
    return *this;
  }
  queue_binary(OpId::copy_, fn::Second{}, *this, src, *this, site);
  return *this;
}

}  // namespace tide
