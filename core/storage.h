// Storage: one block of device memory plus what the engine knows about it (who wrote it
// last, who reads it, whether a queued op failed while writing it). Reference counted by
// tensors and by queued tasks; when the count drops to zero the block returns to the
// caching allocator that made it. Storages are created only by the Allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/device.h"

namespace tide {

class Allocator;
class Failure;
class StreamImpl;

namespace detail {
// The failure of each GPU that failed (a sticky asynchronous error), or nullptr: every
// storage on a failed GPU reads as failed (core/cuda/runtime.h sets these once).
inline constexpr int kMaxGpus = 16;
inline std::atomic<Failure*> g_gpu_failure[kMaxGpus] = {};
}  // namespace detail

// Where an op was queued on a stream: the stream and the op's sequence number there.
// A position is complete when the stream has executed that many ops.
struct StreamPos {
  StreamImpl* stream = nullptr;
  uint64_t seq = 0;  // 1-based: the op is complete once stream->completed() >= seq
};

// Engine bookkeeping per storage. Touched only by frontend threads under the engine lock.
struct HazardState {
  static constexpr int kInlineReaders = 4;
  StreamPos last_write;
  StreamPos readers[kInlineReaders];  // reads since last_write, one entry per stream
  int num_readers = 0;
  uint32_t queued_refs = 0;  // queued tasks referring to this storage
  size_t queued_bytes = 0;   // what the reclaimer counted for it (core/engine/reclaim.h)
};

class Storage {
 public:
  // The memory. A deferred storage without a block yet takes one now (see materialize), and
  // so does a slot's lazy backing (own_lazy_backing); every other storage just returns its
  // pointer (a slot's may be null until bound).
  void* data() const {
    void* p = data_.load(std::memory_order_relaxed);
    if (p || size_class_ >= 0) [[likely]]
      return p;
    return is_deferred() ? materialize(nullptr, !running_a_task()) : slot_backing_data();
  }
  // A deferred storage (Engine::set_allocation(Allocation::at_execution)): made by
  // Allocator::allocate_deferred with no memory, it takes its block from its allocator on
  // first use -- before the first task that names it runs, on that task's worker
  // (execute_task), or at the first other access to data() (a host fill, a read of a
  // never-written tensor). It gives the block back with its last reference.
  bool is_deferred() const { return size_class_ == kDeferred; }
  // False only for a deferred storage that has no block yet: the bytes it does not hold.
  bool resident() const {
    return !is_deferred() || data_.load(std::memory_order_acquire) != nullptr;
  }
  // Deferred storages: takes the block if there is none yet (thread-safe: when two threads
  // race, one block wins and the other goes back to the cache) and returns its data. With
  // `may_wait` the allocation may wait for queued work as Allocator::allocate does; without
  // (inside a task: a worker cannot wait for its own stream) it fails at once. Throws
  // tide::Error("[op] out of memory ...") naming `op` (nullptr: "alloc").
  void* materialize(const char* op, bool may_wait) const;
  // A slot: a storage that owns no memory and whose data pointer the trace executor
  // rebinds before each replay (trace/replay.cpp). Kernels resolve data() when they run,
  // never at enqueue, so the same recorded kernel works on every binding. Freed with its
  // last reference; never counted by the allocator.
  static Storage* make_slot(size_t bytes, Device d) {
    Storage* s = new Storage(nullptr, bytes, d, kSlot);
    s->requested_ = bytes;
    return s;
  }
  bool is_slot() const { return size_class_ == kSlot; }
  // Slots only; the caller orders this against every kernel that uses the slot.
  void rebind(void* data) { data_.store(data, std::memory_order_relaxed); }
  // Slots only: makes `block` (an allocator storage) this slot's memory, owned until the
  // slot is freed or drop_backing() is called.
  void own_backing(Storage* block) {
    owned_.store(block, std::memory_order_relaxed);
    data_.store(block->data(), std::memory_order_relaxed);
  }
  // Slots only: makes `block` (a deferred allocator storage: Allocator::allocate_deferred)
  // this slot's memory without taking it yet: the first data() call takes it (a host fill
  // while a trace records), and a slot no one reads the memory of never holds any.
  void own_lazy_backing(Storage* block) { owned_.store(block, std::memory_order_relaxed); }
  // Slots and deferred storages: the block they own, or nullptr.
  const Storage* backing() const { return owned_.load(std::memory_order_acquire); }
  // Slots only: gives up the owned block (returns it, with its reference, or nullptr).
  Storage* drop_backing() { return owned_.exchange(nullptr, std::memory_order_relaxed); }
  size_t bytes() const { return capacity_; }
  Device device() const { return device_; }

  // The failure of the op that wrote this storage (or of its GPU), or nullptr. Set once
  // by a worker.
  Failure* failure() const {
    Failure* f = failure_.load(std::memory_order_acquire);
    if (f || device_.type == DeviceType::cpu) [[likely]]
      return f;
    return detail::g_gpu_failure[device_.index].load(std::memory_order_acquire);
  }
  // Records f as this storage's failure unless it already has one; takes a reference.
  void poison(Failure* f);
  // Makes f (or nullptr: none) this storage's failure whatever it had (a write that
  // replaced every byte without reading them). Workers only; hazards order it after every
  // task that read the storage, and the submit after every host read (host_readers).
  void replace_failure(Failure* f);

  // The bytes asked for when the block was taken (bytes() is the size class's, larger):
  // a tensor that covers all of them covers everything a failure could have spoiled.
  size_t requested_bytes() const { return requested_; }

  // Host reads in progress (Engine::HostRead): a submit that writes this storage waits
  // for them, so that a reader on the host never sees a half-written value.
  std::atomic<int>& host_readers() { return host_readers_; }

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release();  // may return the block to the allocator
  int use_count() const { return refs_.load(std::memory_order_acquire); }

  HazardState hazard;  // engine only, on the frontend's cache line with refs_

 private:
  friend class Allocator;
  Storage(void* data, size_t capacity, Device d, int size_class, Allocator* owner = nullptr)
      : data_(data), capacity_(capacity), device_(d), size_class_(size_class), owner_(owner) {}
  void reset_for_reuse();
  // True on a thread running a task (a worker, or a waiter running one): materialize may
  // not wait there.
  static bool running_a_task();
  // A slot's data() before it is bound: its lazy backing's memory (taken now), or nullptr.
  void* slot_backing_data() const {
    Storage* b = owned_.load(std::memory_order_acquire);
    if (!b) return nullptr;
    void* p = b->data();
    data_.store(p, std::memory_order_relaxed);
    return p;
  }
  static constexpr int kSlot = -1;
  static constexpr int kDeferred = -2;

  // Read by workers: kept on their own cache line, apart from the reference count and
  // the hazard state that frontend threads write on every op.
  alignas(64) std::atomic<Failure*> failure_{nullptr};
  std::atomic<int> host_readers_{0};
  size_t requested_ = 0;
  // Atomic for deferred storages, whose block two threads may take at once (materialize);
  // relaxed loads cost what plain ones do.
  mutable std::atomic<void*> data_;
  size_t capacity_;
  Device device_;
  int size_class_;
  Allocator* owner_ = nullptr;  // the allocator the block returns to
  // Slots and deferred storages: the block they own, if any.
  mutable std::atomic<Storage*> owned_{nullptr};
  alignas(64) std::atomic<int> refs_{1};
};

// An owning reference to a Storage (intrusive count, so copying it is one atomic add).
class StorageRef {
 public:
  StorageRef() = default;
  // Adopts one reference already held by the caller.
  static StorageRef adopt(Storage* s) {
    StorageRef r;
    r.p_ = s;
    return r;
  }
  // Takes a new reference to s.
  static StorageRef share(Storage* s) {
    s->retain();
    return adopt(s);
  }
  StorageRef(const StorageRef& o) : p_(o.p_) {
    if (p_) p_->retain();
  }
  StorageRef(StorageRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  StorageRef& operator=(StorageRef o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~StorageRef() {
    if (p_) p_->release();
  }
  Storage* get() const { return p_; }
  Storage* operator->() const { return p_; }
  // Gives the reference up to the caller (who must release it); leaves this empty.
  Storage* take() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  Storage* p_ = nullptr;
};

// A typed pointer into a storage, resolved when a kernel runs. Kernel closures capture
// this (never a raw data pointer) so that a traced graph can rebind slot storages between
// replays. Costs one load per operand per kernel.
template <class T>
struct DataRef {
  Storage* s = nullptr;
  int64_t offset = 0;  // in elements of T
  T* get() const { return static_cast<T*>(s->data()) + offset; }
};

}  // namespace tide
