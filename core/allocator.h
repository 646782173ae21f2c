// The caching allocator, one per device. Blocks are rounded up to size classes (four per
// power of two) and kept in a cache when freed, so a training loop reaches a steady state
// with no system allocations. Stats are always on and cheap (relaxed atomics).
//
// Allocation happens on the frontend, when an op is called. With a limit set, a request
// that would pass it first waits for queued work to finish and release its storages
// (memory-pressure backpressure, counted as a stall); it throws tide::Error("[alloc]")
// only when the limit is still passed with nothing left in flight.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/device.h"
#include "core/spinlock.h"
#include "core/storage.h"

namespace tide {

namespace detail {
// Bytes (whole blocks) allocate() and workspace() handed out on this thread since it
// started: a traced replay measures what its kernels allocate while it runs.
inline thread_local uint64_t tl_allocated_bytes = 0;
}  // namespace detail

struct AllocatorStats {
  size_t active_bytes = 0;   // bytes of blocks held by live storages (tensors or queued work)
  size_t peak_bytes = 0;     // max of active_bytes since start or reset_peak()
  size_t cached_bytes = 0;   // freed blocks kept for reuse; not returned to the OS, not active
  size_t reserved_bytes = 0; // active + cached: what the allocator holds from the system
                             // (this is not the process RSS, which also counts code, stacks)
  uint64_t num_allocs = 0;   // allocate() calls that returned a block
  uint64_t num_system_allocs = 0;  // of those, how many needed a new system allocation
  size_t limit_bytes = 0;    // 0 = no limit; applies to active_bytes
  uint64_t pressure_stalls = 0;    // allocations that had to wait for queued work
  uint64_t pressure_stall_ns = 0;  // total time spent in those waits
};

class Allocator {
 public:
  // The allocator of device d. CPU only in this build; throws "[alloc]" for other devices.
  static Allocator& get(Device d = Device::cpu()) {
    if (d.is_cpu()) [[likely]] return cpu();
    return get_other(d);
  }

  // A storage of at least `bytes` bytes (64-byte aligned, contents undefined). May wait for
  // queued work when a limit is set (see above). Throws tide::Error("[alloc]") naming the
  // request, the limit and the bytes in use, tagged with `op`.
  StorageRef allocate(size_t bytes, const char* op = "alloc");

  // Scratch memory for a kernel while it runs on a worker. Never waits (a worker cannot
  // wait for its own stream); throws tide::Error("[op] out of memory ...") at once when
  // the limit would be passed, which fails the op like any kernel error.
  StorageRef workspace(size_t bytes, const char* op);

  AllocatorStats stats() const;
  // Sets the limit on active bytes (0 = none). Does not wait.
  void set_limit(size_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  void reset_peak();
  // Returns all cached blocks to the system. Does not wait for queued work.
  void empty_cache();
  // The block size a request of `bytes` is rounded to.
  static size_t round_size(size_t bytes);

  // Called by the engine: a function that waits for some queued work to finish and
  // release storages; returns false when nothing is in flight.
  using ReclaimFn = bool (*)();
  static void set_reclaim(ReclaimFn f) { reclaim_ = f; }

  ~Allocator();

 private:
  friend class Storage;
  static Allocator& cpu();
  [[noreturn]] static Allocator& get_other(Device d);
  explicit Allocator(Device d) : device_(d) {}
  void free_block(Storage* s);
  Storage* try_take(size_t bytes, bool* fits);

  static constexpr int kNumClasses = 4 * 64;
  Device device_;
  SpinLock mu_;  // free lists; held for a few instructions
  std::vector<Storage*> cache_[kNumClasses];
  std::atomic<size_t> active_{0}, peak_{0}, cached_{0}, limit_{0};
  std::atomic<uint64_t> num_allocs_{0}, num_system_allocs_{0}, stalls_{0}, stall_ns_{0};
  static inline ReclaimFn reclaim_ = nullptr;  // one engine for every device
};

}  // namespace tide
