// The capture hook: while a thread records a trace (trace/recorder.h), the engine, the
// allocator and the sync points of that thread hand their work to a CaptureSink instead
// of queueing, allocating or waiting. Core knows only this interface; trace/ implements it.
// Outside a trace the hook costs one thread-local load per submit and per allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/device.h"
#include "core/kernel_context.h"
#include "core/source_location.h"
#include "core/storage.h"

namespace tide {

class Generator;
struct TensorImpl;

namespace detail {

// A recorded kernel: what a queued task would have run, with the context it would get.
using Kernel = std::function<void(const KernelContext&)>;

// Work a recorded op needs on the host before every replay of its trace on a GPU, which a
// CUDA graph cannot hold: a collective's agreement across ranks (dist/process_group.cpp).
class ReplayHook {
 public:
  virtual ~ReplayHook() = default;
  // Before each launch of the trace's CUDA graph, in recording order, on the replay's
  // worker. Throws to fail the replay (on every rank alike: the agreement is collective).
  virtual void before_replay() = 0;
  // Whether `ok` holds on every rank: a blocking exchange that every rank makes once per
  // graph build, so that every rank launches the graph or every rank the nodes one by one.
  virtual bool on_every_rank(bool ok) = 0;
};

class CaptureSink {
 public:
  virtual ~CaptureSink() = default;
  // An op that would have been queued: its kernel, and the storages it reads and writes.
  virtual void record(const char* op, std::span<Storage* const> reads,
                      std::span<Storage* const> writes, Kernel kernel,
                      tide::SourceLocation site) = 0;
  // A storage for a tensor created while recording.
  virtual StorageRef allocate(size_t bytes, Device device, const char* op) = 0;
  // A host read (item, to_vector, printing, wait_to_read, wait_all): throws tide::Error.
  [[noreturn]] virtual void host_read(const char* op) = 0;
  // The Philox (offset, key) pair a random op of `numel` elements on `device` reads when
  // it runs: refreshed from `gen` on every replay, so replays draw new numbers in eager
  // order. In host memory for the CPU, in the device's memory for a GPU.
  virtual const uint64_t* random_counter(Generator& gen, uint64_t numel, Device device) = 0;
  // Attaches an op description (ops/elementwise_desc.h) to the next record() call; the
  // fusion pass reads it. The pointee is copied.
  virtual void describe_next(const void* desc, size_t bytes) = 0;
  // The references to s this sink holds itself (a recorder keeps one per storage it has
  // seen): whoever counts a storage's owners while recording (autograd, taking a fresh
  // gradient as a leaf's .grad) discounts them.
  virtual int references_held(const Storage* s) const {
    (void)s;
    return 0;
  }
  // Whether s holds host data: made while recording and written by no op recorded so far,
  // so whatever it holds the caller's code put there (from_vector) and it is final now.
  virtual bool host_data(const Storage* s) const {
    (void)s;
    return false;
  }
  // Host work an op needs before every replay on a GPU (ReplayHook), kept with the trace.
  virtual void add_replay_hook(std::shared_ptr<ReplayHook> hook) { (void)hook; }
  // Autograd's host-side effects on a leaf's .grad, which a replay does not redo: a reset
  // (zero_grad), and a backward that made `grad` the leaf's first gradient (taken) or
  // added to the gradient it had (`grad` is that one).
  virtual void grad_reset(const TensorImpl& leaf) { (void)leaf; }
  virtual void grad_bound(const std::shared_ptr<TensorImpl>& leaf,
                          const std::shared_ptr<TensorImpl>& grad, bool taken) {
    (void)leaf, (void)grad, (void)taken;
  }
};

// True while this thread captures kernels into a CUDA graph (trace/cuda/device_graph.h): the
// addresses a kernel uses are baked into the graph, so no memory may be taken from an
// allocator then (Allocator::workspace refuses).
inline thread_local bool tl_graph_capture = false;

// True while a CUDA graph captures the top level of a trace, whose replays run the trace's
// ReplayHooks before each launch: a kernel with a hook then leaves its host work to it.
// False in a loop body's capture (its iterations run on the device, with no host step).
inline thread_local bool tl_replay_hooks_run = false;
// Sets tl_replay_hooks_run for a scope and puts it back.
class ReplayHooksRun {
 public:
  explicit ReplayHooksRun(bool on) : before_(tl_replay_hooks_run) { tl_replay_hooks_run = on; }
  ~ReplayHooksRun() { tl_replay_hooks_run = before_; }
  ReplayHooksRun(const ReplayHooksRun&) = delete;
  ReplayHooksRun& operator=(const ReplayHooksRun&) = delete;

 private:
  bool before_;
};

// The sink of the calling thread, or nullptr when it is not recording.
inline thread_local CaptureSink* tl_capture = nullptr;

inline CaptureSink* capturing() { return tl_capture; }

// Turns recording off on this thread for a scope (the recorder's own allocations).
class CapturePause {
 public:
  CapturePause() : saved_(tl_capture) { tl_capture = nullptr; }
  ~CapturePause() { tl_capture = saved_; }
  CapturePause(const CapturePause&) = delete;
  CapturePause& operator=(const CapturePause&) = delete;

 private:
  CaptureSink* saved_;
};

}  // namespace detail
}  // namespace tide
