// The engine: streams, events, hazard tracking, backpressure and synchronous mode
// (docs/architecture.md, Engine).
//
// A Stream is an in-order queue served by one worker thread. Ops are *submitted* by the
// frontend (the calling thread) and return at once; the worker executes them in order (CPU)
// or launches them in order onto its device queue (CUDA: a cudaStream_t). A task is
// *complete* when its device says so (core/engine/device_stream.h): on the CPU when the worker
// ran it, on CUDA when the GPU wrote its number to the stream's timeline.
// Every submitted task names the storages it reads and writes: the engine makes it wait
// for conflicting work on other streams (read-after-write, write-after-read,
// write-after-write) and keeps those storages alive until it has run.
//
// Hot path: submit() takes one uncontended frontend lock (workers never wait for it),
// writes a fixed-size record into a segmented single-consumer queue and allocates nothing
// in steady state. Completed records are reclaimed (their storages released) by frontend
// threads on their next submit or sync -- and by a worker about to take the block of an
// output allocated at execution, if it gets the lock at once.
// Waiting, on either side, spins briefly before it blocks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "core/device.h"
#include "core/engine/capture.h"
#include "core/kernel_context.h"
#include "core/source_location.h"
#include "core/storage.h"

namespace tide {

using Site = tide::SourceLocation;
class Engine;
class StreamImpl;

// A point in a stream: complete once every op queued on the stream before record() ran.
class Event {
 public:
  Event() = default;
  // True once the marked work has executed. Does not wait.
  bool query() const;
  // Blocks the calling thread until the marked work has executed (spins, then sleeps).
  // Does not rethrow failures: events carry order, tensors carry errors.
  void synchronize() const;
  bool valid() const { return pos_.stream != nullptr; }

 private:
  friend class Stream;
  StreamPos pos_;
};

// A handle to an in-order queue with its own worker thread. Cheap to copy.
class Stream {
 public:
  // A new stream on device d with its own worker thread, started on first use (CUDA: and
  // its own non-blocking cudaStream_t). Throws "[stream]" for a device this process cannot
  // use (no CUDA in this build, no such GPU).
  static Stream create(Device d = Device::cpu());
  // The device's default stream (created on first use for a GPU). Throws like create().
  static Stream default_stream(Device d = Device::cpu());
  // The calling thread's current stream on d: the innermost StreamGuard's, else default.
  static Stream current(Device d = Device::cpu());

  // An event after everything queued on this stream so far. Does not wait.
  Event record() const;
  // Makes later work on this stream wait for e, without blocking the host. Does not wait.
  void wait(const Event& e) const;
  // Blocks until everything queued on this stream so far has executed. Does not rethrow.
  void synchronize() const;

  int id() const;
  Device device() const;
  uint64_t queued() const;    // ops ever submitted to this stream
  uint64_t executed() const;  // ops the worker has finished (run, skipped or cancelled)
  StreamImpl* impl() const { return impl_; }
  friend bool operator==(const Stream& a, const Stream& b) { return a.impl_ == b.impl_; }

 private:
  explicit Stream(StreamImpl* s) : impl_(s) {}
  StreamImpl* impl_;  // streams live as long as the engine
};

// Makes `s` the current stream of the calling thread for its device, for this scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  StreamImpl* prev_;
};

// Makes every op submitted by the calling thread in this scope run synchronously, in the
// calling thread, before the call returns (after earlier conflicting work has finished).
// Such an op is not entered into the hazard state: an op that another thread queues on
// the same storages while it runs is not ordered after it (order those threads yourself).
class SynchronousGuard {
 public:
  explicit SynchronousGuard(bool on = true);
  ~SynchronousGuard();
  SynchronousGuard(const SynchronousGuard&) = delete;
  SynchronousGuard& operator=(const SynchronousGuard&) = delete;

 private:
  int prev_;
};

struct EngineStats {
  uint64_t queued = 0;                 // tasks ever submitted (all streams)
  uint64_t executed = 0;               // tasks the workers have finished
  uint64_t queue_depth = 0;            // queued - executed, now
  size_t inflight_bytes = 0;           // bytes of storages referenced by queued, not yet reclaimed
                                       // tasks (also counted in the allocator's active bytes)
  uint64_t backpressure_stalls = 0;    // submits that blocked on a bound
  uint64_t backpressure_stall_ns = 0;  // total time they blocked
  uint64_t failures = 0;               // tasks that failed or were skipped because an input failed
};

enum class ShutdownMode { drain, cancel };

// When an op's output memory is taken (docs/memory.md compares the two).
//   at_enqueue   (the default) when the op is called: queued work holds its outputs, so
//                running ahead costs memory (the `none` policy of mlp-memory holds every
//                queued minibatch's activations), and an allocator limit stalls the caller
//                until queued work frees enough.
//   at_execution when the op runs, on its stream's worker, as MXNet's engine does: queued
//                work holds no memory until it runs, and blocks come back as executed work
//                is reclaimed (by the worker itself before it takes a block, unless a
//                frontend holds the engine lock just then). An allocation that
//                fails there (out of memory, or over an allocator limit: a worker cannot
//                wait for its own queue) fails the op, and the failure surfaces at the next
//                sync. On a GPU "runs" means "is launched" (blocks come back as the GPU
//                completes work), so the saving is the work the worker has not launched.
// Applies to tensors created while it is set; synchronous mode and traces allocate as
// before. Results are identical either way.
enum class Allocation { at_enqueue, at_execution };

class Engine {
 public:
  // The process-wide engine. Reads TIDE_ENGINE (sync|async) on first use.
  static Engine& get();

  // Backpressure bounds (0 = none, the default). A submit that would pass one blocks until
  // the workers catch up. A single task bigger than the byte bound runs alone.
  void set_max_inflight_ops(uint64_t n);
  void set_max_inflight_bytes(size_t n);
  uint64_t max_inflight_ops() const;
  size_t max_inflight_bytes() const;
  // Process-wide synchronous mode (the TIDE_ENGINE=sync setting).
  void set_synchronous(bool on);
  bool synchronous() const;
  // Where outputs are allocated (see Allocation; the TIDE_ALLOC=enqueue|execution setting).
  // Takes effect for tensors created afterwards; does not wait.
  void set_allocation(Allocation a);
  Allocation allocation() const;
  // True when an output the calling thread creates now is allocated at execution: the
  // setting is at_execution and the thread is not in synchronous mode.
  bool allocates_at_execution() const;

  // Blocks until every stream has executed all queued work, then rethrows the earliest
  // failure no sync has reported yet (and marks all pending failures reported).
  void wait_all();
  // Blocks until every stream has executed all queued work. Does not rethrow.
  void synchronize();
  // Stops the workers: drain runs queued work first; cancel skips what has not started
  // (its outputs fail with "cancelled"). Never waits on anything but running tasks. The
  // engine restarts on the next submit.
  void shutdown(ShutdownMode mode = ShutdownMode::drain);

  EngineStats stats() const;
  // EngineStats::inflight_bytes without the lock (a relaxed read, maybe a moment old).
  size_t inflight_bytes() const;
  // Runs fn with the engine's lock held: what the engine guards (a storage's queued
  // references) is stable meanwhile. fn must not queue, wait, sync or free a storage.
  void run_locked(const std::function<void()>& fn);
  // Releases the storages of every task that has executed. Never blocks on workers.
  void reclaim();

  // ---- for op implementations -------------------------------------------------------
  struct Task;
  struct State;
  static constexpr int kMaxStorages = 8;
  static constexpr size_t kInlinePayload = 160;  // a broadcasting kernel entry's closure fits

  // Queues fn on the calling thread's current stream of `device`. `reads` and `writes`
  // list the storages fn touches (a storage written in place appears in both). fn runs
  // once on the worker, as fn(const KernelContext&) or fn(); on CUDA it launches kernels
  // on ctx.stream. If it throws, the writes are poisoned with the message, named by `op`
  // and `site`. If any read is already poisoned, fn is skipped and the writes inherit it.
  // Throws "[op]" at once when the device has failed or cannot be used.
  template <class F>
  void submit(Device device, const char* op, std::initializer_list<Storage*> reads,
              std::initializer_list<Storage*> writes, F&& fn, Site site) {
    submit(device, op, std::span<Storage* const>(reads.begin(), reads.size()),
           std::span<Storage* const>(writes.begin(), writes.size()), std::forward<F>(fn), site);
  }
  // The same with spans; reads.size() + writes.size() <= kMaxStorages.
  template <class F>
  void submit(Device device, const char* op, std::span<Storage* const> reads,
              std::span<Storage* const> writes, F&& fn, Site site);

  // Blocks until the last write to s has executed. Does not rethrow.
  void wait_for_write(Storage* s);
  // True when the last write to s has executed. Does not wait.
  bool write_done(Storage* s);
  // wait_for_write, then rethrows s's failure, if any.
  void wait_to_read(Storage* s);
  // The references to s other than the queue's own hold on it (Reclaimer::hold): tensors,
  // payloads, views. 1 means one tensor is its only owner, though queued tasks may still
  // read or write it. Takes the engine lock; does not wait.
  int owner_count(Storage* s);

  // A read of s's bytes on the host (item, to_vector, printing): waits for s's last
  // write, then rethrows its failure (when `rethrow`) and, until destroyed, is registered
  // as a reader of s: a submit that writes s, by any thread, waits until the read is over
  // (in the submit, without the engine lock), so the read never sees a half-written value.
  // Keep it short, and queue nothing that writes s from the reading thread while it lives.
  class HostRead {
   public:
    explicit HostRead(Storage* s, bool rethrow = true);
    ~HostRead() { s_->host_readers().fetch_sub(1, std::memory_order_release); }
    HostRead(const HostRead&) = delete;
    HostRead& operator=(const HostRead&) = delete;

   private:
    Storage* s_;
  };

  ~Engine();

 private:
  friend class Stream;
  friend class StreamImpl;
  Engine();
  bool run_synchronously() const;
  // Async path: begin_task takes the frontend lock and returns the queue slot, filled but
  // for the payload; end_task publishes it and unlocks.
  Task& begin_task(Device device, const char* op, std::span<Storage* const> reads,
                   std::span<Storage* const> writes, Site site);
  void end_task(Task& t);
  // Synchronous path: fills t's waits; run_inline waits for them and runs t here.
  void prepare_inline(Task& t, Device device, const char* op, std::span<Storage* const> reads,
                      std::span<Storage* const> writes, Site site);
  void run_inline(Task& t);
  State* s_;
};

// Engine::get().wait_all().
inline void wait_all() { Engine::get().wait_all(); }

// Sets the engine's Allocation for a scope and puts the previous one back (also on error).
// Process-wide, as set_allocation.
class AllocationGuard {
 public:
  explicit AllocationGuard(Allocation a) : prev_(Engine::get().allocation()) {
    Engine::get().set_allocation(a);
  }
  ~AllocationGuard() { Engine::get().set_allocation(prev_); }
  AllocationGuard(const AllocationGuard&) = delete;
  AllocationGuard& operator=(const AllocationGuard&) = delete;

 private:
  Allocation prev_;
};

namespace detail {
inline thread_local bool tl_replacing_write = false;
}  // namespace detail

// Marks the ops the calling thread submits in this scope as replacing every byte of the
// storages they write without depending on their old values (Tensor::copy_ onto a whole
// tensor): such an op runs although a written storage had failed, and a success clears
// that failure (a failure of another input replaces it). A storage both read and written
// by the op counts as written only. Without it a failure is kept by every later write.
class ReplacingWrite {
 public:
  explicit ReplacingWrite(bool on = true) : prev_(detail::tl_replacing_write) {
    detail::tl_replacing_write = on;
  }
  ~ReplacingWrite() { detail::tl_replacing_write = prev_; }
  ReplacingWrite(const ReplacingWrite&) = delete;
  ReplacingWrite& operator=(const ReplacingWrite&) = delete;

 private:
  bool prev_;
};

// ------------------------------------------------------------------------------------
// Task record and the inline submit path.

// Cache-line aligned: a frontend filling one slot never writes a line the worker is
// reading the previous slot from.
struct alignas(64) Engine::Task {
  // Ordered so that a task with no waits and a payload of up to 64 bytes touches three
  // lines: this first one, the storages and the payload's (each line the frontend fills is
  // one the worker then fetches).
  void (*invoke)(Task&, const KernelContext&) = nullptr;  // runs the payload
  void (*destroy)(Task&) = nullptr;                       // destroys the payload
  const char* op = nullptr;
  Site site;
  uint64_t seq = 0;
  StreamImpl* stream = nullptr;  // the stream it is queued on (or runs inline for)
  int64_t enqueue_ns = 0;        // profiler only
  uint8_t num_reads = 0, num_writes = 0, num_waits = 0;
  bool is_barrier = false;          // waits only (Stream::wait)
  bool replaces = false;            // overwrites every byte of its writes (ReplacingWrite)
  Storage* storages[kMaxStorages];  // reads then writes; alive until reclaimed (Reclaimer::hold)
  static constexpr int kMaxWaits = 4;
  StreamPos waits[kMaxWaits];  // positions on other streams to wait for first; only
                               // the first num_waits are written
  alignas(64) unsigned char payload[kInlinePayload];

  // Calls a payload with the context when it takes one.
  template <class Fn>
  static void call(Fn& f, const KernelContext& c) {
    if constexpr (std::is_invocable_v<Fn&, const KernelContext&>) f(c);
    else f();
  }

  template <class F>
  void set(F&& fn) {
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= kInlinePayload && alignof(Fn) <= 16) {
      new (payload) Fn(std::forward<F>(fn));
      invoke = [](Task& t, const KernelContext& c) {
        call(*std::launder(reinterpret_cast<Fn*>(t.payload)), c);
      };
      destroy = [](Task& t) { std::launder(reinterpret_cast<Fn*>(t.payload))->~Fn(); };
    } else {  // rare: big closures live on the heap
      Fn* p = new Fn(std::forward<F>(fn));
      std::memcpy(payload, &p, sizeof(p));
      invoke = [](Task& t, const KernelContext& c) {
        Fn* q;
        std::memcpy(&q, t.payload, sizeof(q));
        call(*q, c);
      };
      destroy = [](Task& t) {
        Fn* q;
        std::memcpy(&q, t.payload, sizeof(q));
        delete q;
      };
    }
  }
};

template <class F>
void Engine::submit(Device device, const char* op, std::span<Storage* const> r,
                    std::span<Storage* const> w, F&& fn, Site site) {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]] {  // tracing: record only
    c->record(op, r, w, detail::Kernel([f = std::forward<F>(fn)](const KernelContext& ctx) mutable {
                Task::call(f, ctx);
              }),
              site);
    return;
  }
  if (run_synchronously()) {  // a record on the stack, run here and now
    Task t;
    prepare_inline(t, device, op, r, w, site);
    t.set(std::forward<F>(fn));
    run_inline(t);
    return;
  }
  Task& t = begin_task(device, op, r, w, site);
  try {
    t.set(std::forward<F>(fn));
  } catch (...) {  // only a heap fallback can throw: queue a no-op so ordering holds
    t.invoke = [](Task&, const KernelContext&) {};
    t.destroy = [](Task&) {};
    end_task(t);
    throw;
  }
  end_task(t);
}

}  // namespace tide
