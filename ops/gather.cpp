// The gather family's front-ends (ops/gather.h): checks, shapes, gradients; the kernels
// are ops/cpu/gather.cpp and ops/cuda/gather.cu.
#include "ops/gather.h"

#include "ops/autograd.h"
#include "ops/gather_kernels.h"
#include "ops/half_compute.h"
#include "ops/kernel_entry.h"
#include "ops/op_util.h"

namespace tide {

using namespace detail;
using Grads = std::vector<Tensor>;

namespace {

void check_rows(const Tensor& rows, const Tensor& data, const char* op) {
  check_defined(rows, op);
  TIDE_CHECK(rows.ndim() == 1 && !is_floating(rows.dtype()), op,
             "rows must be (k) int32 or int64, got ", describe(rows));
  TIDE_CHECK(rows.device() == data.device(), op, "rows are on ", rows.device().str(),
             " but the data is on ", data.device().str());
}

// Elements per row of a tensor of rank >= 1.
int64_t row_width(const Shape& s) {
  int64_t w = 1;
  for (int d = 1; d < s.ndim(); ++d) w *= s[d];
  return w;
}

// Queues entry Args<T, I> over src/g's dtype (the 16-bit types too when Half) and the rows'
// index type.
template <template <class, class> class Args, bool Half = false, class Cpu>
void queue_rows(OpId id, const Tensor& in, const Tensor& rows, const Tensor& y, int64_t n,
                int64_t k, Cpu cpu, Site site) {
  const int64_t width = row_width(in.shape());
  auto dispatch = [&](auto&& f) {
    if constexpr (Half) dispatch_with_half(in.dtype(), f);
    else dispatch_dtype(in.dtype(), f);
  };
  dispatch([&](auto z) {
    using T = decltype(z);
    auto run = [&](auto zi) {
      using I = decltype(zi);
      kernels::queue(id, y.device(), {in.storage(), rows.storage()}, {y.storage()},
                     cpu.template operator()<T, I>(),
                     Args<T, I>{in.ref<T>(), rows.ref<I>(), y.ref<T>(), n, k, width},
                     kernels::NoExtra{}, site);
    };
    if (rows.dtype() == DType::int32) run(int32_t{});
    else run(int64_t{});
  });
}

}  // namespace

Tensor take_rows(const Tensor& src, const Tensor& rows, Site site) {
  // 16-bit rows are moved as they are (a copy, on every device), with the gradient's
  // scatter-add on the float32 path between casts (ops/half_compute.h).
  const DType h = detail::shared_half({&src});
  const char* op = op_name(OpId::take_rows);
  check_defined(src, op);
  check_supported(src, OpId::take_rows);
  TIDE_CHECK(src.ndim() >= 1, op, "needs src of rank >= 1, got ", describe(src));
  check_rows(rows, src, op);
  const int64_t n = src.size(0), k = rows.size(0);
  Shape shape = src.shape();
  shape[0] = k;
  Tensor y = Tensor::empty(shape, src.dtype(), src.device(), op);
  if (y.numel() > 0)
    queue_rows<kernels::TakeRows, true>(
        OpId::take_rows, src, rows, y, n, k,
        []<class T, class I>() { return &kernels::cpu::take_rows<T, I>; }, site);
  autograd::record(op, y, {&src}, [rows, n, h](const Tensor& g) {
    if (h == DType::float32) return Grads{scatter_add_rows(g, rows, n)};
    return Grads{detail::down(scatter_add_rows(detail::up(g), rows, n), h)};
  });
  return y;
}

Tensor scatter_add_rows(const Tensor& g, const Tensor& rows, int64_t n, Site site) {
  const char* op = op_name(OpId::scatter_add_rows);
  check_defined(g, op);
  check_supported(g, OpId::scatter_add_rows);
  TIDE_CHECK(g.ndim() >= 1, op, "needs g of rank >= 1, got ", describe(g));
  check_rows(rows, g, op);
  TIDE_CHECK(rows.size(0) == g.size(0), op, "needs one row index per row of g: ", describe(rows),
             " for ", describe(g));
  TIDE_CHECK(n >= 0, op, "needs n >= 0 rows, got ", n);
  Shape shape = g.shape();
  shape[0] = n;
  Tensor y = Tensor::empty(shape, g.dtype(), g.device(), op);
  if (y.numel() > 0)
    queue_rows<kernels::ScatterAddRows>(
        OpId::scatter_add_rows, g, rows, y, n, rows.size(0),
        []<class T, class I>() { return &kernels::cpu::scatter_add_rows<T, I>; }, site);
  autograd::record(op, y, {&g}, [rows](const Tensor& gy) { return Grads{take_rows(gy, rows)}; });
  return y;
}

}  // namespace tide
