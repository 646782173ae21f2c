// The caching allocator, one per device (and one of pinned host memory per GPU for
// staging). Blocks are rounded up to size classes (four per power of two) and kept in a
// cache when freed, so a training loop reaches a steady state with no system allocations.
// Stats are always on and cheap (relaxed atomics).
//
// Allocation happens on the frontend, when an op is called (or, with the engine allocating
// at execution, when its task runs: allocate_deferred). With a limit set, a request
// that would pass it first waits for queued work to finish and release its storages
// (memory-pressure backpressure, counted as a stall); it throws tide::Error("[op] out of
// memory ...") only when the limit is still passed with nothing left in flight. When the
// system (or the GPU) has no memory left, the cache is returned to it and the request
// retried before failing; cached blocks are also returned before the allocator's
// reservation would pass the limit.
//
// On a GPU, blocks are stream-tagged: a block whose last users (its storage's hazard
// positions) include work on other streams not yet complete is reused only on those
// streams, or once they have passed it. A kernel's workspace is tagged with the task that
// uses it. Users never call record_stream.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/engine/spinlock.h"
#include "core/memory_record.h"
#include "core/storage.h"

namespace tide {

class StreamImpl;

namespace detail {
// Bytes (whole blocks) allocate() and workspace() handed out on this thread since it
// started: a traced replay measures what its kernels allocate while it runs.
inline thread_local uint64_t tl_allocated_bytes = 0;
}  // namespace detail

struct AllocatorStats {
  size_t active_bytes = 0;    // bytes of blocks held by live storages (tensors or queued work)
  size_t peak_bytes = 0;      // max of active_bytes since start or reset_peak()
  size_t cached_bytes = 0;    // freed blocks kept for reuse; not returned to the OS, not active
  size_t reserved_bytes = 0;  // active + cached: what the allocator holds from the system
                              // (this is not the process RSS, which also counts code, stacks)
  uint64_t num_allocs = 0;    // allocate() calls that returned a block
  uint64_t num_system_allocs = 0;  // of those, how many needed a new system allocation
  size_t limit_bytes = 0;          // 0 = no limit; applies to active_bytes
  uint64_t pressure_stalls = 0;    // allocations that had to wait for queued work
  uint64_t pressure_stall_ns = 0;  // total time spent in those waits
  uint64_t cache_flushes = 0;      // times the cache was returned to make room
};

// Where an allocator's blocks come from: the C heap (CPU), the GPU (cudaMalloc) or pinned
// host memory (cudaHostAlloc).
class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // A block of `bytes` (aligned to at least 64), or nullptr when none is left.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  // What an out-of-memory message adds about the memory itself (a GPU's free bytes).
  virtual std::string describe() { return {}; }
  // The most it could ever hand out (a GPU's total memory; the host's memory and swap),
  // or 0 when unknown: a deferred request larger than that fails at the call.
  virtual size_t capacity() { return 0; }
};

class Allocator {
 public:
  // The allocator of device d: the CPU's, or a GPU's (created with the device; throws
  // "[alloc]" when d cannot be used in this process).
  static Allocator& get(Device d = Device::cpu()) {
    if (d.is_cpu()) [[likely]]
      return cpu();
    return get_other(d);
  }

  // An allocator over `source` for storages on `device` (a GPU's pinned staging memory
  // is device cpu). Storages return to the allocator that made them.
  Allocator(Device device, std::unique_ptr<BlockSource> source, std::string name);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // A storage of at least `bytes` bytes (64-byte aligned, contents undefined). May wait for
  // queued work when a limit is set (see above). Throws tide::Error("[op] out of memory")
  // naming the request, the limit, the bytes in use and cached (and a GPU's free bytes).
  StorageRef allocate(size_t bytes, const char* op = "alloc");

  // A deferred storage of `bytes` bytes: it holds no memory (and counts nowhere in the
  // stats) until first used, when it takes a block as allocate() would -- on the worker of
  // the first task that names it, before that task runs, without waiting: over the limit
  // or out of memory, that task fails with "[op] out of memory ... for an output allocated
  // at execution" and the failure surfaces at the next sync, as any kernel error does.
  // A first use outside a task (Tensor::data, a host read) may wait as allocate() does.
  // Throws "[op] out of memory" at once for a request that could never succeed: larger
  // than the limit, or than the memory behind the allocator. While tracing, as allocate().
  // See Engine::set_allocation.
  StorageRef allocate_deferred(size_t bytes, const char* op = "alloc");
  // An op's output: allocate_deferred when the engine allocates at execution for the
  // calling thread (Engine::allocates_at_execution), else allocate.
  StorageRef allocate_output(size_t bytes, const char* op);

  // Scratch memory for a kernel while it runs on a worker. Never waits (a worker cannot
  // wait for its own stream); throws tide::Error("[op] out of memory ...") at once when
  // the limit would be passed, which fails the op like any kernel error. On a GPU the
  // block is tagged with the running task, so it is not reused on another stream before
  // that task is complete. Throws "[op] needs a workspace ..." while this thread captures
  // a CUDA graph (tide::detail::tl_graph_capture).
  StorageRef workspace(size_t bytes, const char* op);

  AllocatorStats stats() const;
  // Sets the limit on active bytes (0 = none). Does not wait.
  void set_limit(size_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  void reset_peak();
  // Returns every cached block that no unfinished work may still use to the system. Does
  // not wait for queued work.
  void empty_cache();
  Device device() const { return device_; }
  const std::string& name() const { return name_; }
  // The block size a request of `bytes` is rounded to.
  static size_t round_size(size_t bytes);

  // Called by the engine: a function that waits for some queued work to finish and
  // release storages; returns false when nothing is in flight.
  using ReclaimFn = bool (*)();
  static void set_reclaim(ReclaimFn f) { reclaim_ = f; }
  // Called by the engine: the stream the calling thread allocates for on device d (a
  // worker's own stream, else its current stream), or nullptr.
  using StreamFn = StreamImpl* (*)(Device d);
  static void set_stream_of(StreamFn f) { stream_of_ = f; }
  // Called by the engine: releases the storages of executed work now if that needs no
  // waiting (the engine lock is free); true when it did. A worker calls it before it takes
  // the block of an output allocated at execution, so that memory comes back as the
  // worker goes, whatever the frontend is doing.
  using TryReclaimFn = bool (*)();
  static void set_try_reclaim(TryReclaimFn f) { try_reclaim_ = f; }

 private:
  friend class Storage;
  static Allocator& cpu();
  static Allocator& get_other(Device d);
  void free_block(Storage* s);
  // The largest block tide hands out: size classes of larger requests would overflow.
  static constexpr size_t kMaxBlock = size_t(1) << 62;
  // Inline, as the fast path of allocate() is: a tiny op's output costs a few hundred
  // instructions in all (bench/RESULTS.md, "The enqueue path's stalls").
  void check_size(size_t bytes, const char* op) const {
    if (bytes > kMaxBlock) [[unlikely]]
      too_large(bytes, op);
  }
  [[noreturn]] void too_large(size_t bytes, const char* op) const;
  // allocate() without the capture check: a block now, waiting for queued work if needed.
  StorageRef allocate_block(size_t bytes, const char* op) {
    bool fits = true;
    if (Storage* s = try_take(bytes, &fits)) [[likely]] {
      if (memory::detail::on()) [[unlikely]]
        memory::detail::on_take(s, bytes, op, false);
      return StorageRef::adopt(s);
    }
    return wait_for_block(bytes, op);
  }
  // allocate_block's slow path: over the limit or out of memory, waits for queued work to
  // release storages and retries; throws "[op] out of memory" when nothing is left.
  StorageRef wait_for_block(size_t bytes, const char* op);
  // A block now or an out-of-memory error saying `what` it was for; never waits (but with
  // `reclaim_first` releases executed work first when it can: try_reclaim_). A GPU block
  // is tagged with the running task (workspaces, deferred storages on a worker).
  StorageRef allocate_now(size_t bytes, const char* op, const char* what, bool reclaim_first,
                          bool workspace);
  // A block of the class for `bytes`: from the cache, else from the source. *fits is false
  // when the limit refuses; nullptr with *fits true when the source has no memory.
  Storage* try_take(size_t bytes, bool* fits);
  // Under mu_: takes the cached blocks no pending work may use out of the cache into *out;
  // returns their bytes. release_blocks gives them to the source, outside mu_.
  size_t take_flushable_locked(std::vector<Storage*>* out);
  void release_blocks(std::vector<Storage*>& blocks);
  // Under mu_: counts a take of `cap` more active bytes (0: already reserved).
  void account_take_locked(size_t cap, bool system);
  [[noreturn]] void throw_oom(size_t bytes, const char* op, const char* what);

  static constexpr int kNumClasses = 4 * 64;
  const Device device_;
  const std::unique_ptr<BlockSource> source_;
  const std::string name_;
  const bool tagged_;                       // blocks carry stream tags (GPU memory)
  std::atomic<size_t> capacity_{SIZE_MAX};  // source_->capacity(), read once (SIZE_MAX: not yet)
  SpinLock mu_;                             // free lists; held for a few instructions
  std::vector<Storage*> cache_[kNumClasses];
  std::atomic<size_t> active_{0}, peak_{0}, cached_{0}, limit_{0};
  std::atomic<uint64_t> num_allocs_{0}, num_system_allocs_{0}, stalls_{0}, stall_ns_{0},
      flushes_{0};
  static inline ReclaimFn reclaim_ = nullptr;  // one engine for every device
  static inline StreamFn stream_of_ = nullptr;
  static inline TryReclaimFn try_reclaim_ = nullptr;
};

}  // namespace tide
