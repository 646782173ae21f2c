// Whether ops choose deterministic algorithms: PyTorch's use_deterministic_algorithms, but
// on by default, since tide promises the same bits run after run (and traced == eager).
// Off, a convolution on a GPU takes the fastest algorithm cuDNN's heuristics offer whose
// workspace fits, deterministic or not (atomics in some backward passes: results may then
// differ in the last bits from run to run). CPU kernels are deterministic either way.
// An op reads the setting when it chooses its algorithm (cached per setting), so a trace
// replays the choice it captured; eager and traced calls made under one setting choose
// alike. Process-wide; safe to call from any thread.
#pragma once

#include <atomic>

namespace tide {

namespace detail {
inline std::atomic<bool> g_deterministic_algorithms{true};
}

inline void set_deterministic_algorithms(bool on) {
  detail::g_deterministic_algorithms.store(on, std::memory_order_relaxed);
}
inline bool deterministic_algorithms() {
  return detail::g_deterministic_algorithms.load(std::memory_order_relaxed);
}

// Sets the setting for a scope and puts the previous one back.
class DeterministicAlgorithmsGuard {
 public:
  explicit DeterministicAlgorithmsGuard(bool on) : before_(deterministic_algorithms()) {
    set_deterministic_algorithms(on);
  }
  ~DeterministicAlgorithmsGuard() { set_deterministic_algorithms(before_); }
  DeterministicAlgorithmsGuard(const DeterministicAlgorithmsGuard&) = delete;
  DeterministicAlgorithmsGuard& operator=(const DeterministicAlgorithmsGuard&) = delete;

 private:
  bool before_;
};

}  // namespace tide
