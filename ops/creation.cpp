// Creation ops: fills, ranges, Philox random tensors, host data, clone and cast.
#include "ops/creation.h"

#include <cmath>
#include <cstring>

#include "core/philox.h"
#include "core/random_scope.h"
#include "ops/autograd.h"
#include "ops/creation_kernels.h"
#include "ops/elementwise.h"
#include "ops/elementwise_kernels.h"
#include "ops/functors.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;

namespace {
Tensor fill_with(OpId id, const Shape& shape, DType dtype, Device device, double value, double step,
                 bool range, Site site) {
  const char* op = op_name(id);
  check_device_supported(device, id);
  Tensor y = Tensor::empty(shape, dtype, device, op);
  dispatch_storage(dtype, [&](auto z) {
    using T = decltype(z);
    kernels::queue(id, device, {}, {y.storage()}, &kernels::cpu::fill<T>,
                   kernels::Fill<T>{y.ref<T>(), y.numel(), value, step, range}, kernels::NoExtra{},
                   site);
  });
  return y;
}
}  // namespace

Tensor zeros(const Shape& shape, DType dtype, Device device, Site site) {
  return fill_with(OpId::zeros, shape, dtype, device, 0.0, 0.0, false, site);
}
Tensor ones(const Shape& shape, DType dtype, Device device, Site site) {
  return fill_with(OpId::ones, shape, dtype, device, 1.0, 0.0, false, site);
}
Tensor full(const Shape& shape, double value, DType dtype, Device device, Site site) {
  check_scalar_fits(value, dtype, "full", "value", false);
  return fill_with(OpId::full, shape, dtype, device, value, 0.0, false, site);
}

Tensor arange(double start, double end, double step, DType dtype, Device device, Site site) {
  TIDE_CHECK(step != 0.0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
             "arange", "needs finite start, end and a nonzero step, got (", start, ", ", end, ", ",
             step, ")");
  // The count converts to int64 only when it is finite and a shape may hold it (2^60,
  // core/shape.h); NaN cannot arise from finite inputs but would be refused too.
  const double count = std::ceil((end - start) / step);
  TIDE_CHECK(count <= double(kMaxNumel) || count <= 0, "arange", "(start, end, step) = (",
             format_scalar(start), ", ", format_scalar(end), ", ", format_scalar(step), ") gives ",
             format_scalar(count), " elements; a tensor holds at most 2^60");
  const int64_t n = count > 0 ? int64_t(count) : 0;
  if (n > 0 && !is_floating(dtype)) {
    // Element i is start + i * step, computed in double as the kernels do.
    check_scalar_fits(start, dtype, "arange", "the first value", false);
    check_scalar_fits(start + double(n - 1) * step, dtype, "arange", "the last value", false);
  }
  return fill_with(OpId::arange, Shape{n}, dtype, device, start, step, true, site);
}

namespace {
Tensor random_fill(OpId id, const Shape& shape, DType dtype, Device device, Generator& gen,
                   Site site) {
  const char* op = op_name(id);
  TIDE_CHECK(is_floating(dtype), op, "needs a floating dtype, got ", dtype);
  check_dtype_supported(dtype, id);
  check_device_supported(device, id);
  // Eager: the counters are reserved now (from the generator, or from the sub-stream of a
  // RandomScope: core/random_scope.h). Traced: the replay refreshes (offset, key) in
  // `counter` before the kernel runs, so each replay draws what eager would draw.
  const uint64_t* counter = nullptr;
  uint64_t fixed_offset = 0, fixed_key = 0;
  if (CaptureSink* c = capturing()) {
    counter = c->random_counter(gen, uint64_t(shape.numel()), device);
  } else {
    PhiloxCounter r = reserve_random(gen, uint64_t(shape.numel()));
    fixed_offset = r.offset;
    fixed_key = r.key;
  }
  Tensor y = Tensor::empty(shape, dtype, device, op);
  dispatch_floating(dtype, [&](auto z) {
    using T = decltype(z);
    kernels::queue(id, device, {}, {y.storage()}, &kernels::cpu::random_fill<T>,
                   kernels::RandomFill<T>{y.ref<T>(), y.numel(), counter, fixed_offset, fixed_key,
                                          id == OpId::randn},
                   kernels::NoExtra{}, site);
  });
  return y;
}
}  // namespace

Tensor randn(const Shape& shape, DType dtype, Generator& gen, Device device, Site site) {
  return random_fill(OpId::randn, shape, dtype, device, gen, site);
}

Tensor rand(const Shape& shape, DType dtype, Generator& gen, Device device, Site site) {
  return random_fill(OpId::rand, shape, dtype, device, gen, site);
}

Tensor from_data(const std::vector<double>& values, const Shape& shape, DType dtype, Device device,
                 Site site) {
  TIDE_CHECK(int64_t(values.size()) == shape.numel(), "from_data", values.size(),
             " values for shape ", shape.str(), " (", shape.numel(), " elements)");
  Tensor y = Tensor::empty(shape, dtype, Device::cpu(), "from_data");
  // A fresh storage nothing else can see yet: fill it now, on the caller's thread.
  dispatch_storage(dtype, [&](auto z) {
    using T = decltype(z);
    T* p = y.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = fn::convert<T>(values[i]);
  });
  return device.is_cpu() ? y : y.to(device, site);
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device, Site site) {
  TIDE_CHECK(int64_t(values.size()) == shape.numel(), "from_data", values.size(),
             " values for shape ", shape.str(), " (", shape.numel(), " elements)");
  Tensor y = Tensor::empty(shape, dtype_v<T>, Device::cpu(), "from_data");
  if (!values.empty()) std::memcpy(y.data<T>(), values.data(), values.size() * sizeof(T));
  return device.is_cpu() ? y : y.to(device, site);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device, Site);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device, Site);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Device, Site);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device, Site);
template Tensor from_vector<bfloat16>(const std::vector<bfloat16>&, const Shape&, Device, Site);
template Tensor from_vector<float16>(const std::vector<float16>&, const Shape&, Device, Site);

Tensor clone(const Tensor& a, Site site) {
  check_defined(a, "clone");
  check_supported(a, OpId::clone);
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device(), "clone");
  kernels::queue(OpId::clone, a.device(), {a.storage()}, {y.storage()}, &kernels::cpu::copy_bytes,
                 kernels::CopyBytes{{a.storage(), a.offset() * int64_t(size_of(a.dtype()))},
                                    y.ref<unsigned char>(),
                                    a.nbytes()},
                 kernels::NoExtra{}, site);
  autograd::record(OpId::clone, y, {&a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return y;
}

Tensor cast(const Tensor& a, DType dtype, Site site) {
  check_defined(a, "cast");
  check_supported(a, OpId::cast);
  if (dtype == a.dtype()) return clone(a, site);
  Tensor y = Tensor::empty(a.shape(), dtype, a.device(), "cast");
  dispatch_storage(a.dtype(), [&](auto za) {
    dispatch_storage(dtype, [&](auto zo) {
      using T = decltype(za);
      using O = decltype(zo);
      kernels::queue(
          OpId::cast, a.device(), {a.storage()}, {y.storage()}, &kernels::cpu::convert<O, T>,
          kernels::Convert<O, T>{a.ref<T>(), y.ref<O>(), a.numel()}, kernels::NoExtra{}, site);
    });
  });
  if (is_floating(a.dtype()) && is_floating(dtype))
    autograd::record(OpId::cast, y, {&a}, [from = a.dtype()](const Tensor& g) {
      return std::vector<Tensor>{cast(g, from)};
    });
  return y;
}

}  // namespace tide
