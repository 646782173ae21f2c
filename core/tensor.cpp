#include "core/tensor.h"

#include <iomanip>
#include <ostream>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/engine/failure.h"
#include "core/engine/object_pool.h"
#include "core/error.h"

namespace tide {

std::shared_ptr<TensorImpl> Tensor::make_impl() {
  return std::allocate_shared<TensorImpl>(detail::PoolAllocator<TensorImpl>());
}

namespace {
// Built with its fields in place: default-constructing and then assigning zeroed the
// shape's extents first (rep stos, a microcoded loop) on every op's output.
std::shared_ptr<TensorImpl> make_impl_of(const Shape& shape, DType dtype, Device device,
                                         StorageRef storage, int64_t offset) {
  return std::allocate_shared<TensorImpl>(detail::PoolAllocator<TensorImpl>(), shape, dtype, device,
                                          std::move(storage), offset);
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, const char* op) {
  StorageRef storage =
      Allocator::get(device).allocate_output(size_t(shape.numel()) * size_of(dtype), op);
  return Tensor(make_impl_of(shape, dtype, device, std::move(storage), 0));
}

Tensor Tensor::from_storage(StorageRef storage, const Shape& shape, DType dtype, int64_t offset) {
  const Device device = storage->device();
  return Tensor(make_impl_of(shape, dtype, device, std::move(storage), offset));
}

void Tensor::throw_undefined() { throw Error("tensor", "use of an undefined tensor"); }

bool Tensor::is_sole_owner() const {
  return impl_ && impl_.use_count() == 1 && impl_->storage.get()->use_count() == 1;
}

Tensor Tensor::detach() const {
  auto d = make_impl();
  d->shape = shape();
  d->dtype = dtype();
  d->device = device();
  d->storage = impl().storage;
  d->offset = offset();
  return Tensor(std::move(d));
}

namespace {
// Inside a trace a host read would bake one value into the graph: refuse it.
void refuse_when_tracing(const char* op) {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    c->host_read(op);
}

// t's elements readable on the host, after a wait for its writer: its own memory on the
// CPU; on a GPU, a copy through pinned staging (core/cuda/runtime.h).
class HostView {
 public:
  HostView(const Tensor& t, const char* op) {
    if (t.device().is_cpu()) {
      p_ = static_cast<const unsigned char*>(t.storage()->data()) + t.offset() * size_of(t.dtype());
      return;
    }
    copy_.resize(t.nbytes());
    const auto* src =
        static_cast<const unsigned char*>(t.storage()->data()) + t.offset() * size_of(t.dtype());
    cuda::DeviceRuntime::get(t.device().index, op).copy_to_host(copy_.data(), src, t.nbytes(), op);
    p_ = copy_.data();
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(p_);
  }

 private:
  const unsigned char* p_ = nullptr;
  std::vector<unsigned char> copy_;
};
}  // namespace

void Tensor::wait_to_read() const {
  refuse_when_tracing("wait_to_read");
  Engine::get().wait_to_read(storage());
}

bool Tensor::is_ready() const { return Engine::get().write_done(storage()); }

bool Tensor::failed() const {
  Engine::HostRead read(storage(), false);
  return storage()->failure() != nullptr;
}

std::string Tensor::failure_message() const {
  Engine::HostRead read(storage(), false);
  const Failure* f = storage()->failure();
  return f ? f->what() : std::string();
}

template <class T>
T Tensor::item() const {
  TIDE_CHECK(numel() == 1, "item", "needs a tensor with one element, got shape ", shape().str());
  refuse_when_tracing("item");
  Engine::HostRead read(storage());  // no in-place write may run while we read
  HostView v(*this, "item");
  return dispatch_storage(dtype(), [&](auto z) { return half_convert<T>(*v.as<decltype(z)>()); });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  refuse_when_tracing("to_vector");
  std::vector<T> out(static_cast<size_t>(numel()));
  Engine::HostRead read(storage());  // no in-place write may run while we copy
  HostView v(*this, "to_vector");
  dispatch_storage(dtype(), [&](auto z) {
    const auto* p = v.as<decltype(z)>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = half_convert<T>(p[i]);
  });
  return out;
}

#define TIDE_INSTANTIATE(T)           \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
TIDE_INSTANTIATE(float)
TIDE_INSTANTIATE(double)
TIDE_INSTANTIATE(int32_t)
TIDE_INSTANTIATE(int64_t)
TIDE_INSTANTIATE(bfloat16)
TIDE_INSTANTIATE(float16)
#undef TIDE_INSTANTIATE

namespace {
template <class T>
void print_rec(std::ostream& os, const T* p, const Shape& s, int d, int64_t stride_prod) {
  int64_t n = s[d];
  int64_t inner = stride_prod / (n ? n : 1);
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n > 6 && i == 3) {
      os << "..., ";
      i = n - 3;
    }
    if (d + 1 == s.ndim()) {
      if constexpr (is_half_v<T>) os << std::setprecision(6) << float(p[i]);
      else if constexpr (std::is_floating_point_v<T>) os << std::setprecision(6) << p[i];
      else os << p[i];
    } else {
      print_rec(os, p + i * inner, s, d + 1, inner);
    }
    if (i + 1 < n) os << ", ";
  }
  os << "]";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  refuse_when_tracing("print");
  Engine::HostRead read(t.storage());
  HostView v(t, "print");
  os << "Tensor(";
  dispatch_storage(t.dtype(), [&](auto z) {
    using T = decltype(z);
    if (t.ndim() > 0) print_rec(os, v.as<T>(), t.shape(), 0, t.numel());
    else if constexpr (is_half_v<T>) os << float(*v.as<T>());
    else os << +*v.as<T>();
  });
  os << ", shape=" << t.shape() << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  return os << ")";
}

}  // namespace tide
