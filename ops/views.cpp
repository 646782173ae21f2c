// Views: reshape and slices along dim 0 share the storage of their base (no kernel).
#include "core/error.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/op_util.h"

namespace tide {

namespace {
Tensor view_of(const Tensor& base, const Shape& shape, int64_t offset) {
  auto v = Tensor::make_impl();
  v->shape = shape;
  v->dtype = base.dtype();
  v->device = base.device();
  v->storage = base.impl().storage;
  v->offset = offset;
  return Tensor(std::move(v));
}

// The gradient of a row range [begin, end) of a tensor of shape `full`.
Tensor pad_rows(const Tensor& g, const Shape& full, int64_t begin) {
  Tensor z = zeros(full, g.dtype(), g.device());
  int64_t rows = g.ndim() == full.ndim() ? g.shape()[0] : 1;
  z.slice(begin, begin + rows).copy_(g.reshape(z.slice(begin, begin + rows).shape().vec()));
  return z;
}
}  // namespace

Tensor Tensor::reshape(std::vector<int64_t> dims) const {
  detail::check_defined(*this, "reshape");
  int infer = -1;
  int64_t known = 1;
  bool empty = false, over = false;  // a checked product: it must not wrap
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      TIDE_CHECK(infer < 0, "reshape", "only one extent may be -1");
      infer = int(i);
    } else {
      TIDE_CHECK(dims[i] >= 0, "reshape", "negative extent ", dims[i]);
      empty |= dims[i] == 0;
      if (!over && __builtin_mul_overflow(known, dims[i], &known)) over = true;
    }
  }
  if (empty) known = 0;
  TIDE_CHECK(!over || empty, "reshape", "cannot reshape ", shape().str(),
             ": the new extents multiply past 2^63");
  if (infer >= 0) {
    TIDE_CHECK(known != 0 && numel() % known == 0, "reshape", "cannot infer -1 reshaping ",
               shape().str(), " (", numel(), " elements)");
    dims[size_t(infer)] = numel() / known;
  }
  Shape s(dims);
  TIDE_CHECK(s.numel() == numel(), "reshape", "cannot reshape ", shape().str(), " (", numel(),
             " elements) to ", s.str(), " (", s.numel(), " elements)");
  Tensor v = view_of(*this, s, offset());
  autograd::record(OpId::reshape, v, {this}, [from = shape().vec()](const Tensor& g) {
    return std::vector<Tensor>{g.reshape(from)};
  });
  return v;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  detail::check_defined(*this, "slice");
  TIDE_CHECK(ndim() >= 1, "slice", "needs rank >= 1, got a 0-d tensor");
  int64_t n = shape()[0];
  TIDE_CHECK(0 <= begin && begin <= end && end <= n, "slice", "rows [", begin, ", ", end,
             ") out of range for shape ", shape().str());
  Shape s = shape();
  s[0] = end - begin;
  int64_t row = n ? numel() / n : 0;
  Tensor v = view_of(*this, s, offset() + begin * row);
  autograd::record(OpId::slice, v, {this}, [full = shape(), begin](const Tensor& g) {
    return std::vector<Tensor>{pad_rows(g, full, begin)};
  });
  return v;
}

Tensor Tensor::operator[](int64_t i) const {
  detail::check_defined(*this, "select");
  TIDE_CHECK(ndim() >= 1, "select", "needs rank >= 1, got a 0-d tensor");
  int64_t n = shape()[0];
  TIDE_CHECK(0 <= i && i < n, "select", "index ", i, " out of range for shape ", shape().str());
  std::vector<int64_t> rest(shape().begin() + 1, shape().end());
  int64_t row = numel() / n;
  Tensor v = view_of(*this, Shape(rest), offset() + i * row);
  autograd::record(OpId::select, v, {this}, [full = shape(), i](const Tensor& g) {
    return std::vector<Tensor>{pad_rows(g, full, i)};
  });
  return v;
}

}  // namespace tide
