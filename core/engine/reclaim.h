// Reclaim (docs/architecture.md, Engine): queued tasks keep every storage they read or write alive
// until they are complete; frontend threads release those references in batches, under the engine
// lock (and a worker about to take the block of an output allocated at execution, when the lock is
// free: Allocator::set_try_reclaim). Also counts the bytes held by queued work (each storage once,
// however many tasks hold it) and recycles the segments of task slots. Callers hold the engine
// lock; nothing here blocks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "core/storage.h"

namespace tide {

class StreamImpl;
struct Segment;

class Reclaimer {
 public:
  // Executed tasks are reclaimed in batches: reading the workers' counters on every
  // submit would cost a cache miss per op. Big storages make a batch due at once.
  static constexpr int kReclaimEvery = 32;
  static constexpr size_t kReclaimBytes = size_t(1) << 20;

  // Holds s for a task being queued. The queue takes one reference per storage, from its
  // first queued task to its last one's reclaim, however many tasks name it (HazardState::
  // queued_refs counts them under the lock): a storage read by every op costs no atomic
  // per op, and the count's cache line is not bounced by a refcount on each submit. The
  // storage counts its bytes over the same span -- if it holds them then: a deferred
  // storage without its block yet (allocation at execution) counts nothing.
  void hold(Storage* s) {
    if (s->hazard.queued_refs++ == 0) {
      s->retain();
      size_t b = s->resident() ? s->bytes() : 0;
      s->hazard.queued_bytes = b;
      add_inflight(int64_t(b));
      bytes_since_ += b;
    }
  }
  // The references the queue holds on s (hold's): one while any queued task names it.
  // Caller holds the engine lock.
  static int references_held(const Storage* s) { return s->hazard.queued_refs ? 1 : 0; }
  // Counts one submit; true when a batch is due.
  bool note_submit() { return ++submits_since_ >= kReclaimEvery || bytes_since_ >= kReclaimBytes; }
  // Releases the storages of every complete, unreclaimed task of `streams` (and destroys
  // their payloads); segments the workers have left go to `free_segments`. Returns how
  // many tasks it reclaimed.
  size_t reclaim(std::deque<StreamImpl>& streams, std::vector<Segment*>& free_segments);
  // Bytes of storages referenced by queued, unreclaimed tasks (as hold() counts them).
  size_t inflight_bytes() const { return inflight_.load(std::memory_order_relaxed); }

 private:
  void add_inflight(int64_t d) {  // written only under the engine lock
    inflight_.store(size_t(int64_t(inflight_.load(std::memory_order_relaxed)) + d),
                    std::memory_order_relaxed);
  }
  int submits_since_ = 0;
  size_t bytes_since_ = 0;
  std::atomic<size_t> inflight_{0};
};

}  // namespace tide
