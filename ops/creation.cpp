// Creation ops: fills, ranges, Philox random tensors, host data, clone and cast.
#include "ops/creation.h"

#include <cmath>
#include <cstring>

#include "core/philox.h"
#include "core/random_scope.h"
#include "ops/autograd.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;

namespace {
template <class Gen>
Tensor fill_with(OpId id, const Shape& shape, DType dtype, Site site, Gen gen) {
  const char* op = op_name(id);
  Tensor y = Tensor::empty(shape, dtype, Device::cpu(), op);
  dispatch_dtype(dtype, [&](auto z) {
    using T = decltype(z);
    DataRef<T> r = y.ref<T>();
    int64_t n = y.numel();
    launch(op, y.device(), {}, {y.storage()}, [=] {
      T* p = r.get();
      parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] = gen.template operator()<T>(i);
      });
    }, site);
  });
  return y;
}

struct Constant {
  double v;
  template <class T> T operator()(int64_t) const { return T(v); }
};
struct Range {
  double start, step;
  template <class T> T operator()(int64_t i) const { return T(start + double(i) * step); }
};
}  // namespace

Tensor zeros(const Shape& shape, DType dtype, Site site) {
  return fill_with(OpId::zeros, shape, dtype, site, Constant{0.0});
}
Tensor ones(const Shape& shape, DType dtype, Site site) {
  return fill_with(OpId::ones, shape, dtype, site, Constant{1.0});
}
Tensor full(const Shape& shape, double value, DType dtype, Site site) {
  return fill_with(OpId::full, shape, dtype, site, Constant{value});
}

Tensor arange(double start, double end, double step, DType dtype, Site site) {
  TIDE_CHECK(step != 0.0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
             "arange", "needs finite start, end and a nonzero step, got (", start, ", ", end,
             ", ", step, ")");
  double count = std::ceil((end - start) / step);
  int64_t n = count > 0 ? int64_t(count) : 0;
  return fill_with(OpId::arange, Shape{n}, dtype, site, Range{start, step});
}

namespace {
// One Philox block gives four consecutive elements.
template <bool kNormal>
Tensor random_fill(OpId id, const Shape& shape, DType dtype, Generator& gen, Site site) {
  const char* op = op_name(id);
  TIDE_CHECK(is_floating(dtype), op, "needs a floating dtype, got ", dtype);
  // Eager: the counters are reserved now (from the generator, or from the sub-stream of a
  // RandomScope: core/random_scope.h). Traced: the replay refreshes (offset, key) in
  // `counter` before the kernel runs, so each replay draws what eager would draw.
  const uint64_t* counter = nullptr;
  uint64_t fixed_offset = 0, fixed_key = 0;
  if (CaptureSink* c = capturing()) {
    counter = c->random_counter(gen, uint64_t(shape.numel()));
  } else {
    PhiloxCounter r = reserve_random(gen, uint64_t(shape.numel()));
    fixed_offset = r.offset;
    fixed_key = r.key;
  }
  Tensor y = Tensor::empty(shape, dtype, Device::cpu(), op);
  dispatch_floating(dtype, [&](auto z) {
    using T = decltype(z);
    DataRef<T> r = y.ref<T>();
    int64_t n = y.numel();
    launch(op, y.device(), {}, {y.storage()}, [=] {
      T* p = r.get();
      uint64_t offset = counter ? counter[0] : fixed_offset;
      uint64_t key = counter ? counter[1] : fixed_key;
      parallel_for((n + 3) / 4, kParallelGrain / 16, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          T v[4];
          if constexpr (kNormal) philox::normal4(offset, key, uint64_t(b), v);
          else philox::uniform4(offset, key, uint64_t(b), v);
          for (int64_t l = 0, i = 4 * b; l < 4 && i < n; ++l, ++i) p[i] = v[l];
        }
      });
    }, site);
  });
  return y;
}
}  // namespace

Tensor randn(const Shape& shape, DType dtype, Generator& gen, Site site) {
  return random_fill<true>(OpId::randn, shape, dtype, gen, site);
}

Tensor rand(const Shape& shape, DType dtype, Generator& gen, Site site) {
  return random_fill<false>(OpId::rand, shape, dtype, gen, site);
}

Tensor from_data(const std::vector<double>& values, const Shape& shape, DType dtype,
                 Site site) {
  TIDE_CHECK(int64_t(values.size()) == shape.numel(), "from_data", values.size(),
             " values for shape ", shape.str(), " (", shape.numel(), " elements)");
  Tensor y = Tensor::empty(shape, dtype, Device::cpu(), "from_data");
  // A fresh storage nothing else can see yet: fill it now, on the caller's thread.
  dispatch_dtype(dtype, [&](auto z) {
    using T = decltype(z);
    T* p = y.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = T(values[i]);
  });
  return y;
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Site site) {
  TIDE_CHECK(int64_t(values.size()) == shape.numel(), "from_data", values.size(),
             " values for shape ", shape.str(), " (", shape.numel(), " elements)");
  Tensor y = Tensor::empty(shape, dtype_v<T>, Device::cpu(), "from_data");
  if (!values.empty()) std::memcpy(y.data<T>(), values.data(), values.size() * sizeof(T));
  return y;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Site);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Site);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Site);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Site);

Tensor clone(const Tensor& a, Site site) {
  check_defined(a, "clone");
  check_cpu(a, "clone");
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device(), "clone");
  DataRef<unsigned char> src{a.storage(), a.offset() * int64_t(size_of(a.dtype()))};
  DataRef<unsigned char> dst = y.ref<unsigned char>();
  size_t bytes = a.nbytes();
  launch("clone", y.device(), {a.storage()}, {y.storage()}, [=] {
    unsigned char* d = dst.get();
    const unsigned char* s = src.get();
    parallel_for(int64_t(bytes), kParallelGrain * 4, [&](int64_t lo, int64_t hi) {
      std::memcpy(d + lo, s + lo, size_t(hi - lo));
    });
  }, site);
  autograd::record("clone", y, {&a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return y;
}

Tensor cast(const Tensor& a, DType dtype, Site site) {
  check_defined(a, "cast");
  check_cpu(a, "cast");
  if (dtype == a.dtype()) return clone(a, site);
  Tensor y = Tensor::empty(a.shape(), dtype, a.device(), "cast");
  dispatch_dtype(a.dtype(), [&](auto za) {
    dispatch_dtype(dtype, [&](auto zo) {
      using T = decltype(za);
      using O = decltype(zo);
      DataRef<T> ra = a.ref<T>();
      DataRef<O> ro = y.ref<O>();
      int64_t n = a.numel();
      launch("cast", y.device(), {a.storage()}, {y.storage()}, [=] {
        const T* pa = ra.get();
        O* po = ro.get();
        parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) po[i] = O(pa[i]);
        });
      }, site);
    });
  });
  if (is_floating(a.dtype()) && is_floating(dtype))
    autograd::record("cast", y, {&a}, [from = a.dtype()](const Tensor& g) {
      return std::vector<Tensor>{cast(g, from)};
    });
  return y;
}

}  // namespace tide
