// An asymmetric fence for a Dekker pair whose one side runs on every op and whose other
// side runs rarely: the frontend publishes a task and then checks whether the
// worker sleeps; the worker announces that it sleeps and then checks for tasks. Each side
// needs a full fence between its store and its load, or both may miss the other (a lost
// wake-up). A full fence (a locked instruction) on x86 waits for the store buffer to drain,
// which on the enqueue path means waiting for the task slot's lines to arrive from the
// worker's core: the frontend's largest single cost. With Linux's membarrier
// (MEMBARRIER_CMD_PRIVATE_EXPEDITED) the rare side makes every running thread of the
// process pass a full fence, so the frequent side needs only a compiler barrier.
//
//   frequent side:  a.store(1); light_fence(); if (b.load()) ...
//   rare side:      b.store(1); heavy_fence(); if (a.load()) ...
//
// Where membarrier is missing or refused (kernels before 4.14, seccomp filters), light_fence
// is a full fence and heavy_fence one too: the protocol is the ordinary symmetric one.
#pragma once

#include <atomic>

namespace tide::detail {

// Set by enable_asymmetric_fence() before any thread uses the pair; cleared by
// heavy_fence() if membarrier ever fails (a forked child that lost the registration), so
// that from then on both sides are full fences. Relaxed loads: a plain load on x86.
inline std::atomic<bool> g_heavy_fence{false};

// Registers the process for membarrier's expedited private command if the kernel offers it;
// idempotent. Call before starting the threads that use the fences (the engine does, when
// it is constructed). Returns whether light_fence() is now only a compiler barrier.
bool enable_asymmetric_fence();

// The frequent side's fence: orders its earlier stores before its later loads, given that
// the other side calls heavy_fence().
inline void light_fence() {
  if (g_heavy_fence.load(std::memory_order_relaxed))
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else std::atomic_thread_fence(std::memory_order_seq_cst);
}

// The rare side's fence: a full fence here and, through membarrier, in every running thread
// of the process (a few microseconds: inter-processor interrupts).
void heavy_fence();

}  // namespace tide::detail
