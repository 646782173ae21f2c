// Reductions. A reduction over one axis views the input as [outer, n, inner]; a full
// reduction is outer = inner = 1. Each output element is computed by one thread in a
// fixed order, and the full sum adds fixed-size blocks in order, so results never depend
// on the thread count.
#include "ops/reduce.h"

#include <cmath>
#include <limits>

#include "core/allocator.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;

namespace {

struct Geometry {
  int64_t outer = 1, n = 1, inner = 1;
};

Geometry geometry(const Shape& s, int axis) {
  Geometry g;
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

template <class T> using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

enum class Kind { sum, mean, max, argmax };

// Sums x[k*stride], k < n, blockwise in a fixed order.
template <class T>
Acc<T> sum_strided(const T* x, int64_t n, int64_t stride) {
  Acc<T> s = 0;
  for (int64_t k = 0; k < n; ++k) s += Acc<T>(x[k * stride]);
  return s;
}

template <class T, class O>
void reduce_kernel(Kind kind, const T* x, O* y, Geometry g) {
  if (kind == Kind::sum || kind == Kind::mean) {
    double scale = kind == Kind::mean ? 1.0 / double(g.n) : 1.0;
    if (g.outer == 1 && g.inner == 1) {
      // Full reduction: fixed 16K-element blocks summed in parallel, then in order.
      constexpr int64_t kBlock = 16384;
      int64_t blocks = (g.n + kBlock - 1) / kBlock;
      // Up to 1M elements the partial sums fit on the stack (no allocation: a traced
      // replay allocates nothing but its outputs). Beyond, they live in a workspace from
      // the allocator, so they count against its limit; over the limit, this op fails.
      constexpr int64_t kStackBlocks = 64;
      Acc<T> stack_part[kStackBlocks];
      StorageRef ws;
      Acc<T>* part = stack_part;
      if (blocks > kStackBlocks) {
        ws = Allocator::get().workspace(size_t(blocks + 1) * sizeof(Acc<T>), "sum");
        part = static_cast<Acc<T>*>(ws->data());
      }
      std::fill(part, part + blocks, Acc<T>(0));
      parallel_for(blocks, 2, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          int64_t lo = b * kBlock, hi = std::min(g.n, lo + kBlock);
          part[size_t(b)] = sum_strided(x + lo, hi - lo, 1);
        }
      });
      Acc<T> s = 0;
      for (int64_t b = 0; b < blocks; ++b) s += part[b];
      y[0] = kind == Kind::mean ? O(double(s) * scale) : O(s);
      return;
    }
    int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.n * g.inner));
    parallel_for(g.outer, grain, [&](int64_t o0, int64_t o1) {
      // Accumulators on the stack for the common small case; the heap for wide rows.
      constexpr int64_t kStack = 256;
      Acc<T> local[kStack];
      std::vector<Acc<T>> heap(size_t(g.inner > kStack ? g.inner : 0));
      Acc<T>* acc = g.inner > kStack ? heap.data() : local;
      for (int64_t o = o0; o < o1; ++o) {
        const T* base = x + o * g.n * g.inner;
        std::fill(acc, acc + g.inner, Acc<T>(0));
        for (int64_t k = 0; k < g.n; ++k) {
          const T* row = base + k * g.inner;
          for (int64_t i = 0; i < g.inner; ++i) acc[i] += Acc<T>(row[i]);
        }
        for (int64_t i = 0; i < g.inner; ++i)
          y[o * g.inner + i] =
              kind == Kind::mean ? O(double(acc[i]) * scale) : O(acc[i]);
      }
    });
    return;
  }
  // max / argmax: NaN wins (first NaN), else the first maximum.
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.n));
  parallel_for(g.outer * g.inner, grain, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      int64_t o = j / g.inner, i = j % g.inner;
      const T* p = x + o * g.n * g.inner + i;
      T best = p[0];
      int64_t arg = 0;
      for (int64_t k = 1; k < g.n && best == best; ++k) {
        T v = p[k * g.inner];
        if (v > best || v != v) {
          best = v;
          arg = k;
        }
      }
      if (kind == Kind::max) y[j] = O(best);
      else y[j] = O(arg);
    }
  });
}

Tensor reduce(Kind kind, OpId id, const Tensor& a, int axis, bool all, bool keepdim, Site site) {
  const char* op = op_name(id);
  check_defined(a, op);
  check_cpu(a, op);
  if (kind == Kind::mean) check_floating(a, op);
  Geometry g;
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
    TIDE_CHECK(g.n > 0, op, "empty reduction over ", all ? "all elements" : "an axis",
               " of shape ", a.shape().str());
  DType odt = kind == Kind::argmax ? DType::int64
              : (kind == Kind::sum && !is_floating(a.dtype())) ? DType::int64
                                                              : a.dtype();
  Tensor y = Tensor::empty(out, odt, a.device(), op);
  dispatch_dtype(a.dtype(), [&](auto za) {
    dispatch_dtype(odt, [&](auto zo) {
      using T = decltype(za);
      using O = decltype(zo);
      if constexpr (std::is_same_v<O, T> || std::is_same_v<O, int64_t>) {
        DataRef<T> rx = a.ref<T>();
        DataRef<O> ry = y.ref<O>();
        if (g.outer * g.inner == 0) return;  // nothing to write
        launch(op, y.device(), {a.storage()}, {y.storage()},
               [=] { reduce_kernel<T, O>(kind, rx.get(), ry.get(), g); }, site);
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

Tensor sum(const Tensor& a, Site site) {
  Tensor y = reduce(Kind::sum, OpId::sum, a, 0, true, false, site);
  autograd::record("sum", y, {&a}, [s = a.shape()](const Tensor& g) {
    return std::vector<Tensor>{expand_to(g, s)};
  });
  return y;
}

Tensor sum(const Tensor& a, int axis, bool keepdim, Site site) {
  Tensor y = reduce(Kind::sum, OpId::sum, a, axis, false, keepdim, site);
  int ax = normalize_axis(axis, a.ndim(), "sum");
  autograd::record("sum", y, {&a}, [s = a.shape(), ax](const Tensor& g) {
    return std::vector<Tensor>{expand_to(g.reshape(keepdim_shape(s, ax)), s)};
  });
  return y;
}

Tensor mean(const Tensor& a, Site site) {
  Tensor y = reduce(Kind::mean, OpId::mean, a, 0, true, false, site);
  autograd::record("mean", y, {&a}, [s = a.shape()](const Tensor& g) {
    return std::vector<Tensor>{expand_to(g / double(std::max<int64_t>(1, s.numel())), s)};
  });
  return y;
}

Tensor mean(const Tensor& a, int axis, bool keepdim, Site site) {
  Tensor y = reduce(Kind::mean, OpId::mean, a, axis, false, keepdim, site);
  int ax = normalize_axis(axis, a.ndim(), "mean");
  autograd::record("mean", y, {&a}, [s = a.shape(), ax](const Tensor& g) {
    double n = double(std::max<int64_t>(1, s[ax]));
    return std::vector<Tensor>{expand_to(g.reshape(keepdim_shape(s, ax)) / n, s)};
  });
  return y;
}

Tensor max(const Tensor& a, Site site) {
  Tensor y = reduce(Kind::max, OpId::max, a, 0, true, false, site);
  autograd::record("max", y, {&a}, [a = a.detach(), y = y.detach()](const Tensor& g) {
    Tensor mask = eq(a, expand_to(y, a.shape()));
    return std::vector<Tensor>{mask * expand_to(g / sum(mask), a.shape())};
  });
  return y;
}

Tensor max(const Tensor& a, int axis, bool keepdim, Site site) {
  Tensor y = reduce(Kind::max, OpId::max, a, axis, false, keepdim, site);
  int ax = normalize_axis(axis, a.ndim(), "max");
  autograd::record("max", y, {&a}, [a = a.detach(), y = y.detach(), ax](const Tensor& g) {
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

Tensor sum_to(const Tensor& g, const Shape& shape, Site site) {
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
