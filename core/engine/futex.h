// Private futex wait/wake on a 32-bit word (Linux). std::atomic::wait in libstdc++ 12
// uses shared futexes, whose key lookup costs a page-table walk per call; the engine waits
// and wakes on its hot path, so it calls the private form directly.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace tide::detail {

// Sleeps while *word == expected (returns at once otherwise, or on a wake or a signal).
inline void futex_wait(const std::atomic<uint32_t>* word, uint32_t expected) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

// Wakes up to n threads sleeping on word.
inline void futex_wake(const std::atomic<uint32_t>* word, int n) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE_PRIVATE, n, nullptr,
          nullptr, 0);
}

}  // namespace tide::detail
