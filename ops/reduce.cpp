// Reductions: checks, output shapes and gradients; the kernels are the reduction entry
// (ops/reduce_kernels.h). A reduction over one axis views the input as [outer, n, inner];
// a full reduction is outer = inner = 1.
#include "ops/reduce.h"

#include <cmath>
#include <limits>

#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/half_compute.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"
#include "ops/reduce_kernels.h"

namespace tide {

using namespace detail;

namespace {

using kernels::ReduceGeometry;
using Kind = kernels::ReduceKind;

ReduceGeometry geometry(const Shape& s, int axis) {
  ReduceGeometry g;
  for (int i = 0; i < axis; ++i) g.outer *= s[i];
  g.n = s[axis];
  for (int i = axis + 1; i < s.ndim(); ++i) g.inner *= s[i];
  return g;
}

Shape reduced_shape(const Shape& s, int axis, bool keepdim) {
  Shape out;
  for (int i = 0; i < s.ndim(); ++i) {
    if (i != axis) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor reduce(Kind kind, OpId id, const Tensor& a, int axis, bool all, bool keepdim, Site site) {
  const char* op = op_name(id);
  check_defined(a, op);
  check_supported(a, id);
  if (kind == Kind::mean || kind == Kind::sum_squares) check_floating(a, op);
  ReduceGeometry g;
  Shape out;
  if (all) {
    g.n = a.numel();
  } else {
    TIDE_CHECK(a.ndim() >= 1, op, "cannot reduce axis ", axis, " of a 0-d tensor");
    axis = normalize_axis(axis, a.ndim(), op);
    g = geometry(a.shape(), axis);
    out = reduced_shape(a.shape(), axis, keepdim);
  }
  if (kind == Kind::max || kind == Kind::argmax)
    TIDE_CHECK(g.n > 0, op, "empty reduction over ", all ? "all elements" : "an axis", " of shape ",
               a.shape().str());
  DType odt = kind == Kind::argmax                             ? DType::int64
              : (kind == Kind::sum && !is_floating(a.dtype())) ? DType::int64
                                                               : a.dtype();
  Tensor y = Tensor::empty(out, odt, a.device(), op);
  // 16-bit tensors load widened: the sums accumulate in double, max and argmax compare as
  // float (an integer output, argmax, is int64).
  dispatch_with_half(a.dtype(), [&](auto za) {
    dispatch_with_half(odt, [&](auto zo) {
      using T = decltype(za);
      using O = decltype(zo);
      if constexpr (std::is_same_v<O, T> || std::is_same_v<O, int64_t>) {
        if (g.outer * g.inner == 0) return;  // nothing to write
        kernels::queue(id, a.device(), {a.storage()}, {y.storage()}, &kernels::cpu::reduce<T, O>,
                       kernels::Reduce<T, O>{a.ref<T>(), y.ref<O>(), g, kind}, kernels::NoExtra{},
                       site);
      }
    });
  });
  return y;
}

// g (the reduced gradient) broadcast back over the reduced axis: one copy kernel.
Tensor expand_to(const Tensor& g, const Shape& shape) {
  Tensor y = Tensor::empty(shape, g.dtype(), g.device(), "expand");
  y.copy_(g);
  return y;
}

std::vector<int64_t> keepdim_shape(const Shape& s, int axis) {
  std::vector<int64_t> d = s.vec();
  d[size_t(axis)] = 1;
  return d;
}

}  // namespace

Tensor sum_squares(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return sum_squares(f, site);
  // 16-bit operands sum in double in one kernel.
  Tensor y = reduce(Kind::sum_squares, OpId::sum_squares, a, 0, true, false, site);
  autograd::record(OpId::sum_squares, y, {&a}, [x = a.detach()](const Tensor& g) {
    return std::vector<Tensor>{mul(mul(x, 2.0), g)};
  });
  return y;
}

Tensor sum(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return sum(f, site);
  Tensor y = reduce(Kind::sum, OpId::sum, a, 0, true, false, site);
  autograd::record(OpId::sum, y, {&a}, [s = a.shape()](const Tensor& g) {
    return std::vector<Tensor>{expand_to(g, s)};
  });
  return y;
}

Tensor sum(const Tensor& a, int axis, bool keepdim, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return sum(f, axis, keepdim, site);
  Tensor y = reduce(Kind::sum, OpId::sum, a, axis, false, keepdim, site);
  int ax = normalize_axis(axis, a.ndim(), "sum");
  autograd::record(OpId::sum, y, {&a}, [s = a.shape(), ax](const Tensor& g) {
    return std::vector<Tensor>{expand_to(g.reshape(keepdim_shape(s, ax)), s)};
  });
  return y;
}

Tensor mean(const Tensor& a, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return mean(f, site);
  Tensor y = reduce(Kind::mean, OpId::mean, a, 0, true, false, site);
  autograd::record(OpId::mean, y, {&a}, [s = a.shape()](const Tensor& g) {
    return std::vector<Tensor>{expand_to(g / double(std::max<int64_t>(1, s.numel())), s)};
  });
  return y;
}

Tensor mean(const Tensor& a, int axis, bool keepdim, Site site) {
  if (Tensor f = a; autocast::raise({&f}, site)) return mean(f, axis, keepdim, site);
  Tensor y = reduce(Kind::mean, OpId::mean, a, axis, false, keepdim, site);
  int ax = normalize_axis(axis, a.ndim(), "mean");
  autograd::record(OpId::mean, y, {&a}, [s = a.shape(), ax](const Tensor& g) {
    double n = double(std::max<int64_t>(1, s[ax]));
    return std::vector<Tensor>{expand_to(g.reshape(keepdim_shape(s, ax)) / n, s)};
  });
  return y;
}

Tensor max(const Tensor& a, Site site) {
  Tensor y = reduce(Kind::max, OpId::max, a, 0, true, false, site);
  autograd::record(OpId::max, y, {&a}, [a = a.detach(), y = y.detach()](const Tensor& g) {
    Tensor mask = eq(a, expand_to(y, a.shape()));
    return std::vector<Tensor>{mask * expand_to(g / sum(mask), a.shape())};
  });
  return y;
}

Tensor max(const Tensor& a, int axis, bool keepdim, Site site) {
  Tensor y = reduce(Kind::max, OpId::max, a, axis, false, keepdim, site);
  int ax = normalize_axis(axis, a.ndim(), "max");
  autograd::record(OpId::max, y, {&a}, [a = a.detach(), y = y.detach(), ax](const Tensor& g) {
    std::vector<int64_t> kd = keepdim_shape(a.shape(), ax);
    Tensor mask = eq(a, expand_to(y.reshape(kd), a.shape()));
    Tensor share = g.reshape(kd) / sum(mask, ax, true);
    return std::vector<Tensor>{mask * expand_to(share, a.shape())};
  });
  return y;
}

Tensor argmax(const Tensor& a, Site site) {
  return reduce(Kind::argmax, OpId::argmax, a, 0, true, false, site);
}
Tensor argmax(const Tensor& a, int axis, bool keepdim, Site site) {
  return reduce(Kind::argmax, OpId::argmax, a, axis, false, keepdim, site);
}

namespace {
// How many sums sum_to(g, shape) queues: one for leading dimensions, one per kept dimension
// of size 1.
int sums_to(const Shape& g, const Shape& shape) {
  const int lead = g.ndim() - shape.ndim();
  int n = lead > 0 ? 1 : 0;
  for (int i = 0; i < shape.ndim() && lead + i < g.ndim(); ++i)
    if (shape[i] == 1 && g[lead + i] != 1) ++n;
  return n;
}
}  // namespace

Tensor sum_to(const Tensor& g, const Shape& shape, Site site) {
  // 16-bit g: one sum reads it directly (double accumulation rounded through float: the
  // float32 path's bits); two or more take the float32 path between casts, whose float32
  // intermediates 16-bit ones would round.
  if (DType h = detail::shared_half({&g}); h != DType::float32 && sums_to(g.shape(), shape) > 1)
    return detail::in_float32(h, [&] { return sum_to(detail::up(g), shape, site); });
  if (g.shape() == shape) return g;
  const char* op = "sum_to";
  TIDE_CHECK(broadcast_shapes(g.shape(), shape, op) == g.shape(), op, "cannot sum ",
             g.shape().str(), " to ", shape.str());
  Tensor r = g;
  int lead = g.ndim() - shape.ndim();
  if (lead > 0) {  // collapse the leading dims into one and sum it away
    int64_t lead_n = 1;
    for (int i = 0; i < lead; ++i) lead_n *= g.shape()[i];
    std::vector<int64_t> d{lead_n};
    for (int i = 0; i < shape.ndim(); ++i) d.push_back(g.shape()[lead + i]);
    r = sum(r.reshape(d), 0, false, site);
  }
  for (int i = 0; i < shape.ndim(); ++i)
    if (shape[i] == 1 && r.shape()[i] != 1) r = sum(r, i, true, site);
  return r;
}

}  // namespace tide
