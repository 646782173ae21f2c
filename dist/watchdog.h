// The deadline of every collective a device backend has queued (NCCL's), and the one
// decision its watchdog thread makes: a collective queued more than `timeout` ago and still
// not complete means another rank skipped it, hangs or died, and this rank's kernels would
// wait for it for ever. The backend then aborts its communicator, which ends them, and every
// later call fails with the message. Shared logic with an explicit clock: tests/dist drive it
// without a GPU; dist/nccl.cpp marks completions from host functions on its stream and polls
// from a thread. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace tide::dist {

class CollectiveWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // timeout 0: never fires.
  CollectiveWatchdog(int rank, std::chrono::milliseconds timeout);

  // A collective named `op` (a string literal) queued at `now`; returns its ticket for done().
  uint64_t queued(const char* op, Clock::time_point now);
  // The collective with this ticket completed (its stream reached it). Unknown tickets (done
  // twice, or from before a fire) are ignored.
  void done(uint64_t ticket);
  // At `now`: "" while every pending collective is within its deadline, else why the oldest
  // late one failed, naming it, this rank and the timeout. Once fired it stays fired: later
  // calls return the same message.
  std::string check(Clock::time_point now);
  bool fired() const;
  size_t pending() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

  // TIDE_NCCL_TIMEOUT: whole seconds a collective may take (default 600, PyTorch's default
  // for NCCL; 0 turns the watchdog off). Throws "[dist]" for anything but a whole number
  // from 0 to 86400.
  static std::chrono::milliseconds timeout_from_env();

 private:
  struct Pending {
    uint64_t ticket;
    const char* op;
    Clock::time_point queued;
  };
  const int rank_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::deque<Pending> pending_;  // in ticket order: the oldest first
  uint64_t next_ = 1;
  std::string fired_;  // the message once fired
};

}  // namespace tide::dist
