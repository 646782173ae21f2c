// Spin-then-yield polling shared by the engine's waits (workers and frontend threads).
// A futex sleep costs a wake of ~50 us on these VMs; a yielding thread gives its core to
// any other runnable thread (OpenBLAS's, the pool's) and still sees a flag flip within
// microseconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace tide::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Asks for the cache line at p in a writable state (PREFETCHW), so that a later store does
// not wait for another core to give the line up. __builtin_prefetch(p, 1) emits a plain
// PREFETCHT0 unless the target has PRFCHW, which fetches the line shared and leaves the
// store its upgrade; the opcode is a NOP on x86-64 processors without it.
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline constexpr int64_t kSpinNs = 50'000;      // spin this long (a futex wake ~2.5 us, an
                                                // idle-core wake via condvar ~55 us here)
inline constexpr int64_t kYieldNs = 1'000'000;  // then yield the core this long

// Spins up to kSpinNs while pred() is false, then polls with sched_yield up to kYieldNs.
// Returns pred(): false means the caller should block.
template <class Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  int64_t deadline = 0, yield_until = 0;
  for (int i = 1;; ++i) {
    if (yield_until) std::this_thread::yield();
    else cpu_relax();
    if (pred()) return true;
    if ((i & 63) == 0 || yield_until) {
      int64_t now = steady_ns();
      if (!deadline) {
        deadline = now + kSpinNs;
      } else if (now > deadline) {
        if (!yield_until) yield_until = now + kYieldNs;
        else if (now > yield_until) return false;
      }
    }
  }
}

}  // namespace tide::detail
