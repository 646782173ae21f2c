// Engine internals shared by the engine's source files and white-box tests: the stream
// record, the task segments and the engine state. Not a public header.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/engine/backpressure.h"
#include "core/engine/device_stream.h"
#include "core/engine/engine.h"
#include "core/engine/reclaim.h"
#include "core/engine/spin_wait.h"
#include "core/engine/spinlock.h"

namespace tide {

using detail::cpu_relax;

class Failure;

namespace detail {
// The task the calling worker is running ({} elsewhere): GPU workspaces are tagged with it.
inline thread_local StreamPos tl_running_task;
}  // namespace detail

// A block of task slots. Seq s (1-based) lives in the segment with base < s <= base+kSize.
struct Segment {
  static constexpr int kSize = 256;
  Engine::Task slots[kSize];
  std::atomic<Segment*> next{nullptr};
  uint64_t base = 0;
};

class StreamImpl {
 public:
  StreamImpl(Engine::State* eng, int id, Device d) : eng(eng), id(id), device(d) {}

  Engine::State* eng;
  const int id;
  const Device device;
  std::unique_ptr<DeviceStream> dev;  // set right after construction
  bool polled = false;  // completion is reported by the device (dev->poll), not the worker

  // Producer side: frontend threads, under the engine lock. On their own cache line: the
  // worker reads the fields above on every task, and a frontend write beside them would
  // pull the line away from it once per op.
  alignas(64) uint64_t submitted = 0;
  Segment* tail_seg = nullptr;
  // Reclaimer side: frontend threads, under the engine lock.
  uint64_t reclaimed = 0;
  Segment* reclaim_seg = nullptr;
  bool started = false;
  std::thread worker;

  // Shared with the worker.
  alignas(64) std::atomic<uint64_t> published{0};
  std::atomic<uint32_t> wake_epoch{0};
  std::atomic<int> stop{0};         // 0 run, 1 drain, 2 cancel
  std::atomic<bool> nudged{false};  // the device side has work for an idle worker
  // Read by the frontend right after every publish, written by the worker only as it goes
  // to sleep and wakes. Beside `published` that read waited for the line the publish had
  // just claimed from the worker; on a line of its own it hits the frontend's cache.
  alignas(64) std::atomic<bool> sleeping{false};
  // Tasks the worker has run (CPU) or launched (CUDA), skipped or cancelled.
  alignas(64) std::atomic<uint64_t> issued{0};
  // Tasks complete: written by the worker (CPU) or read from the device (polled streams).
  alignas(64) std::atomic<uint64_t> completed{0};
  // Bumped with every completion a worker publishes; hosts sleep on it (a futex needs a
  // 32-bit word).
  std::atomic<uint32_t> completed_epoch{0};
  // The run token: whoever holds it runs this stream's next published tasks, in order --
  // the worker, or a thread waiting on the host for one of them while the worker does not
  // run (a hand-off to a descheduled worker cost a time slice under load).
  // `issued` and `head_seg` belong to the holder.
  alignas(64) std::atomic<bool> running{false};
  // White-box tests: while set, the worker takes no work, as if it could not get a core, so
  // that only waiters run tasks. Clearing it must be followed by wake().
  std::atomic<bool> worker_held{false};
  Segment* head_seg = nullptr;
  // An idle CPU worker looks for published work once per this many pauses (a power of
  // two; ~1 us on the 2-vCPU AMD VM, where a pause takes 31 ns: tide_bench's
  // BM_PauseInstruction): see worker_loop.
  static constexpr unsigned kPollPauses = 32;
  // ... for its first this many polls: about spin_until's 50 us spin at 31 ns a pause,
  // less where a pause is shorter; after that (yielding) it looks at every one.
  static constexpr unsigned kSkippingPolls = 2048;

  bool is_complete(uint64_t seq) const {
    if (completed.load(std::memory_order_acquire) >= seq) return true;
    return polled && dev->poll() >= seq;
  }
  // Tasks complete now (polls the device for polled streams).
  uint64_t done() const { return polled ? dev->poll() : completed.load(std::memory_order_acquire); }
  // Raises `completed` to at least c (device pollers and failure handling race on it).
  void advance_completed(uint64_t c) {
    uint64_t cur = completed.load(std::memory_order_relaxed);
    while (cur < c && !completed.compare_exchange_weak(cur, c, std::memory_order_acq_rel)) {
    }
  }
  // The slot of task seq; valid while seq is queued and not reclaimed.
  Engine::Task& slot(uint64_t seq) const;
  void worker_loop();
  // Takes the run token if it is free and runs published tasks in order until `until` has
  // run (the worker: all of them). Returns false when another thread held the token. Work
  // left behind wakes the worker if it sleeps (never the case when the worker calls it).
  bool run_published(uint64_t until);
  // A CPU stream's next task could be run by the calling thread now (the token is free).
  bool runnable_here(uint64_t seq) const {
    return !polled && !running.load(std::memory_order_relaxed) &&
           issued.load(std::memory_order_relaxed) < seq;
  }
  // Wakes the worker if it sleeps; only the caller that clears `sleeping` pays the syscall.
  void wake();
  // Makes an idle worker call dev->idle() again (a device request arrived).
  void nudge();
};

struct Engine::State {
  // Frontend lock: submit, reclaim, hazard state. Workers never wait for it: they only
  // try_lock it to reclaim executed work before an output allocated at execution.
  // Cache lines by who writes them (on a 2-core VM a line that a frontend
  // writes and a worker reads costs a transfer per op). Written by frontends on every
  // submit, under mu:
  SpinLock mu;
  std::deque<StreamImpl> streams;
  std::vector<Segment*> free_segments;
  bool shutting_down = false;
  alignas(64) Reclaimer reclaimer;
  // Read by workers on every task; written by waiting hosts and failing tasks:
  alignas(64) std::atomic<int> waiters{0};  // threads blocked on some stream's `completed`
  std::atomic<uint64_t> failures{0};
  // Settings, read on every submit, rarely written:
  alignas(64) std::atomic<uint64_t> max_ops{0}, max_bytes{0};
  std::atomic<bool> synchronous{false};
  std::atomic<bool> alloc_at_execution{false};
  std::atomic<uint64_t> bp_stalls{0}, bp_stall_ns{0};

  std::mutex failures_mu;
  std::vector<Failure*> pending_failures;  // each holds a reference

  // Under mu. A new stream on d with its device side; throws "[stream]" when d cannot be
  // used here.
  StreamImpl& add_stream(Device d);
  // Under mu. The default stream of d (a GPU's is created on first use).
  StreamImpl& default_stream(Device d);
  // Under mu. The calling thread's current stream for d.
  StreamImpl& current_stream(Device d);
  Segment* new_segment(uint64_t base);
  // Blocks until pos has executed: spin, then sleep (the device decides how).
  void wait_pos(StreamPos pos);
  // A host sync on pos (item, to_vector, synchronize, events): on a CPU stream whose worker
  // is not running, runs the tasks up to pos on the calling thread (same order, same
  // kernels, so the results are bit-identical); otherwise as wait_pos. Never with mu held:
  // kernels may allocate, and the allocator's reclaim takes mu (wait_pos is for callers
  // that hold it).
  void sync_pos(StreamPos pos);
  // Caller holds mu. Releases the storages of executed tasks; returns how many tasks.
  size_t reclaim_locked() { return reclaimer.reclaim(streams, free_segments); }
  uint64_t inflight_ops() const;
  // Caller holds mu. Waits, with mu released, until some stream with queued work makes
  // progress (running its next task itself, as sync_pos does); false if nothing is
  // queued. Syncs, stats and other frontends go on meanwhile.
  bool wait_progress_locked();
  void start_worker(StreamImpl& s);
  void record_failure(Failure* f);

  // The cold pieces of Engine::begin_task (the hot ones are inlined in engine.cpp). Called
  // with mu held; they release it while they wait.
  // Returns once no shutdown is joining the workers (begin_task, and a second shutdown).
  void wait_out_shutdown_locked();
  // Blocks until `bounds` admit a task naming these storages (counted as added_bytes
  // does), running queued work or waiting for it (wait_progress_locked); counts the stall
  // in bp_stalls and bp_stall_ns. Cold: only with set_max_inflight_ops/_bytes bounds set.
  [[gnu::noinline]] void apply_backpressure_locked(BackpressureBounds bounds,
                                                   std::span<Storage* const> reads,
                                                   std::span<Storage* const> writes);
};

inline Engine::Task& StreamImpl::slot(uint64_t seq) const {
  // Walk from the reclaim segment: seq is not reclaimed, so it lies at or after it.
  Segment* g = reclaim_seg;
  while (seq - 1 - g->base >= uint64_t(Segment::kSize)) g = g->next.load(std::memory_order_acquire);
  return g->slots[seq - 1 - g->base];
}

// Runs (or skips, or cancels) one task on `dev`; `inline_run`: synchronous mode.
void execute_task(Engine::Task& t, Engine::State* eng, DeviceStream& dev, bool cancel,
                  bool inline_run);

}  // namespace tide
