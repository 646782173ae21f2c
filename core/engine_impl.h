// Engine internals shared by engine.cpp and its tests' white-box helpers: the stream
// record, the task segments and the spin-then-block wait.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "core/engine.h"

namespace tide {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

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

  // Producer side: frontend threads, under the engine lock.
  uint64_t submitted = 0;
  Segment* tail_seg = nullptr;
  // Reclaimer side: frontend threads, under the engine lock.
  uint64_t reclaimed = 0;
  Segment* reclaim_seg = nullptr;
  bool started = false;
  std::thread worker;

  // Shared with the worker.
  alignas(64) std::atomic<uint64_t> published{0};
  std::atomic<uint32_t> wake_epoch{0};
  std::atomic<bool> sleeping{false};
  std::atomic<int> stop{0};  // 0 run, 1 drain, 2 cancel
  alignas(64) std::atomic<uint64_t> completed{0};
  // Bumped with every completion; hosts sleep on it (a futex needs a 32-bit word).
  std::atomic<uint32_t> completed_epoch{0};
  Segment* head_seg = nullptr;  // worker only

  bool is_complete(uint64_t seq) const {
    return completed.load(std::memory_order_acquire) >= seq;
  }
  void worker_loop();
};

}  // namespace tide
