// Tensor: a cheap value handle over a shared TensorImpl (shape, dtype, device, storage,
// element offset, autograd state). The storage is shared separately, so views (reshape,
// slices along dim 0) share memory. Contiguous row-major always.
//
// Nothing in this class waits for the backend except the sync points, marked "Waits".
// Every op is queued and returns a tensor whose storage is already allocated.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/source_location.h"
#include "core/storage.h"

namespace tide {

namespace autograd {
struct Node;
}

struct TensorImpl {
  TensorImpl() = default;
  // Every field written once (no aggregate initialisation: GCC zeroes the whole object
  // with rep stos first, on every op's output).
  TensorImpl(const Shape& shape, DType dtype, Device device, StorageRef storage, int64_t offset)
      : shape(shape), dtype(dtype), device(device), storage(std::move(storage)), offset(offset) {}

  Shape shape;
  DType dtype = DType::float32;
  Device device;
  StorageRef storage;
  int64_t offset = 0;  // in elements

  // Autograd. grad_fn: the op that produced this tensor (null for leaves).
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;
  std::shared_ptr<TensorImpl> grad;
};

class Tensor {
 public:
  Tensor() = default;  // undefined; most calls on it throw
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A new tensor with uninitialised contents; allocates at the call (may wait on memory
  // pressure, see Allocator), or, when the engine allocates at execution
  // (Engine::set_allocation), when the first task that uses it runs or data() is first
  // called. For op implementations and host fills.
  static Tensor empty(const Shape& shape, DType dtype = DType::float32,
                      Device device = Device::cpu(), const char* op = "empty");

  // A tensor over an existing storage (elements from `offset`); the caller guarantees the
  // storage holds offset + numel elements. For the trace executor and views.
  static Tensor from_storage(StorageRef storage, const Shape& shape, DType dtype,
                             int64_t offset = 0);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int ndim() const { return impl().shape.ndim(); }
  int64_t numel() const { return impl().shape.numel(); }
  int64_t size(int dim) const { return impl().shape.dim(dim); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  size_t nbytes() const { return size_t(numel()) * size_of(dtype()); }

  // ---- raw access (op implementations) -----------------------------------------------
  Storage* storage() const { return impl().storage.get(); }
  int64_t offset() const { return impl().offset; }
  // The first element, resolved when a kernel runs: what kernel closures capture.
  template <class T>
  DataRef<T> ref() const {
    return {storage(), offset()};
  }
  // Pointer to the first element now. Does not wait for queued work, but a tensor made
  // while outputs are allocated at execution takes its memory here if no task has yet
  // (which may wait on memory pressure, as Tensor::empty may). Host code that waited, and
  // host fills of fresh tensors only: kernel closures capture ref() (traced replays rebind
  // storages).
  template <class T>
  T* data() const {
    return static_cast<T*>(storage()->data()) + offset();
  }
  // Throws "[tensor] use of an undefined tensor" on an undefined handle.
  TensorImpl& impl() const {
    if (!impl_) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // Identity of the impl (two handles to the same tensor share it).
  uintptr_t id() const { return reinterpret_cast<uintptr_t>(impl_.get()); }
  // True when this handle is the only reference to its impl and storage.
  bool is_sole_owner() const;

  // ---- views (share storage; differentiable) -----------------------------------------
  // Same elements, new shape; one extent may be -1. Throws "[reshape]" on a count mismatch.
  Tensor reshape(std::vector<int64_t> shape) const;
  // Rows [begin, end) along dim 0. Throws "[slice]" when out of range.
  Tensor slice(int64_t begin, int64_t end) const;
  // Row i along dim 0, one rank lower. Throws "[select]" when out of range.
  Tensor operator[](int64_t i) const;
  // A new, empty impl from the per-thread pool (op implementations use it for views).
  static std::shared_ptr<TensorImpl> make_impl();
  // A handle sharing storage with no autograd history.
  Tensor detach() const;

  // ---- devices (defined in ops/copy.cpp) ----------------------------------------------
  // This tensor on `device`: itself when it is there already, else a queued copy through
  // pinned host staging (CPU <-> GPU; GPU -> GPU goes through the host). Differentiable.
  // Does not wait. Throws "[to]" when `device` cannot be used here.
  Tensor to(Device device, tide::SourceLocation site = tide::SourceLocation::current()) const;

  // ---- sync points -------------------------------------------------------------------
  // A sync on a CPU tensor whose stream's worker is not running (asleep, or waiting for a
  // core on a loaded machine) runs the queued ops up to the awaited one on the calling
  // thread: the same kernels in the same order, so results are bit-identical, and the
  // hand-off's wake-up is not paid. Later ops are left to the worker.
  // Waits for the last write to this tensor, then rethrows the failure of the op that
  // produced it, if any (with the op and the place it was queued).
  void wait_to_read() const;
  // True when the last write has executed. Does not wait.
  bool is_ready() const;
  // Waits for the last write to this tensor only (not the whole queue), then says whether
  // its storage holds a failure; never throws it. The rule: an op that fails, or is skipped
  // because an input failed, poisons what it writes; in-place arithmetic (add_, mul_(0),
  // ...) reads the old values and keeps the failure; copy_ onto a whole tensor from
  // another one (as nn::load does) replaces it, and so clears it when the source is sound.
  bool failed() const;
  // The failure's message, "[op] what (queued at file:line)", or "" when there is none.
  // Waits like failed(). Does not mark the failure reported (wait_all still sees it).
  std::string failure_message() const;
  // Waits. The single element, converted to T (float, double, int32_t, int64_t, bfloat16,
  // float16; a 16-bit side converts through float, rounding to nearest even). Throws "[item]"
  // unless numel() == 1.
  template <class T = float>
  T item() const;
  // Waits. All elements in row-major order, converted to T as item() converts.
  template <class T = float>
  std::vector<T> to_vector() const;

  // ---- autograd (defined in ops/autograd.cpp) ----------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  // Marks a leaf as requiring grad. Throws "[requires_grad]" for non-floating dtypes.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  // The accumulated gradient (undefined until a backward reached this tensor).
  Tensor grad() const;
  // Drops the accumulated gradient.
  void zero_grad();
  // Queues the gradient ops of the graph behind this scalar (or of `grad` for
  // non-scalars) in reverse topological order, accumulating into the leaves' grad().
  // Does not wait. Throws "[backward]" if this tensor does not require grad, or if the
  // graph was freed by an earlier backward (unless that one passed retain_graph).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // ---- in-place (defined in ops/elementwise.cpp); queued writes with hazard tracking --
  // this += alpha * other (other broadcast to this shape).
  Tensor& add_(const Tensor& other, double alpha = 1.0,
               tide::SourceLocation site = tide::SourceLocation::current());
  // this -= alpha * other.
  Tensor& sub_(const Tensor& other, double alpha = 1.0,
               tide::SourceLocation site = tide::SourceLocation::current());
  // this *= other.
  Tensor& mul_(const Tensor& other, tide::SourceLocation site = tide::SourceLocation::current());
  Tensor& mul_(double s, tide::SourceLocation site = tide::SourceLocation::current());
  // Overwrites this with src's values (broadcast). Queued. For bfloat16 and float16 only from
  // a tensor of the same shape (a byte copy); "[copy_]" when it would broadcast.
  Tensor& copy_(const Tensor& src, tide::SourceLocation site = tide::SourceLocation::current());

  // Assigning to a temporary (a + b = c) does not compile.
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;
  Tensor& operator=(const Tensor&) && = delete;
  Tensor& operator=(Tensor&&) && = delete;

 private:
  [[noreturn]] static void throw_undefined();
  std::shared_ptr<TensorImpl> impl_;
};

// Waits. Prints shape, dtype and values (at most 6 per dim, with "...").
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace tide
