// SpinLock: a test-and-test-and-set lock for short critical sections on the enqueue path
// (the engine's frontend lock, the allocator's free lists). Uncontended it costs one
// atomic exchange; contended it spins with pause, then yields.
#pragma once

#include <atomic>
#include <thread>

#include "core/host_device.h"

namespace tide {

class SpinLock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  bool try_lock() { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace tide
