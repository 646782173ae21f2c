// Helpers for the engine and autograd suites: a bounded gate that holds a stream, a flag
// with a timed wait, a fixture that restores every engine setting, and a per-test
// watchdog so that an engine bug fails the run instead of hanging it.
//
// Every wait here is bounded: a gate left closed opens itself after its timeout and fails
// its op ("gate timed out"), and a test that still runs after kWatchdogLimit aborts the
// process with its name. Nothing here asserts on elapsed time.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/engine_impl.h"
#include "error_of.h"
#include "tide.h"

namespace tide::testing_support {

using namespace std::chrono_literals;

// How long a gate waits to be opened before it fails its op. Far above anything a correct
// engine needs (gates are opened by the test as soon as it has looked), short enough that
// a wrong engine fails within the run.
inline constexpr std::chrono::milliseconds kGateTimeout = 20s;
// How long a test thread waits for something another thread or the engine must do.
inline constexpr std::chrono::milliseconds kWaitTimeout = 20s;
// The last line of defence: a test running this long aborts the process.
inline constexpr std::chrono::seconds kWatchdogLimit = 240s;

// A one-shot flag with a bounded wait (std::latch has no timed wait).
class Flag {
 public:
  void set() {
    {
      std::lock_guard lock(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  bool is_set() const {
    std::lock_guard lock(mu_);
    return set_;
  }
  // True when set within `d`.
  bool wait_for(std::chrono::milliseconds d = kWaitTimeout) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [&] { return set_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool set_ = false;
};

// Polls pred (every millisecond) until it holds or `d` passes. True when it held.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds d = kWaitTimeout) {
  auto deadline = std::chrono::steady_clock::now() + d;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// True if t becomes ready within d. Gives a wrongly ordered op time to run (worker
// wake-ups can take milliseconds), so that an ordering bug shows up as a failed check; a
// correct engine keeps t pending and this costs d.
inline bool becomes_ready_within(const Tensor& t, std::chrono::milliseconds d = 200ms) {
  return wait_until([&] { return t.is_ready(); }, d);
}

// A debug::gate whose body blocks its stream until open() is called (from any thread) or
// the timeout passes; on timeout the op fails with "gate timed out". The state is shared
// with the queued body, so a Gate may go out of scope before its op runs; its destructor
// opens it so that a failed assertion never leaves a worker blocked.
class Gate {
 public:
  explicit Gate(std::chrono::milliseconds timeout = kGateTimeout) : s_(std::make_shared<State>()) {
    s_->timeout = timeout;
  }
  ~Gate() { open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // Queues the gate on the calling thread's current stream. It writes (and reads) t.
  // `extra` runs on the worker after the gate opened (before the op completes).
  void hold(const Tensor& t, std::function<void()> extra = {}, Site site = Site::current()) {
    auto s = s_;
    debug::gate(
        t,
        [s, extra = std::move(extra)] {
          s->entered.set();
          if (!s->open.wait_for(s->timeout)) {
            s->timed_out.store(true);
            throw std::runtime_error("gate timed out: the test never opened it");
          }
          if (extra) extra();
        },
        site);
  }
  void open() { s_->open.set(); }
  // True once a worker has started the gate's body (bounded wait).
  bool wait_entered(std::chrono::milliseconds d = kWaitTimeout) const {
    return s_->entered.wait_for(d);
  }
  bool entered() const { return s_->entered.is_set(); }
  bool timed_out() const { return s_->timed_out.load(); }

 private:
  struct State {
    Flag open, entered;
    std::atomic<bool> timed_out{false};
    std::chrono::milliseconds timeout{};
  };
  std::shared_ptr<State> s_;
};

using test_util::error_of;

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// Streams for tests, created once per process: the engine caps the number of streams and
// keeps them for its lifetime.
inline Stream test_stream(int i) {
  static std::vector<Stream>* streams = [] {
    auto* v = new std::vector<Stream>;
    for (int k = 0; k < 6; ++k) v->push_back(Stream::create());
    return v;
  }();
  return streams->at(size_t(i));
}

// Drops failures that earlier tests queued and never synced, so that wait_all() in this
// test sees only its own.
inline void clear_pending_failures() {
  try {
    Engine::get().wait_all();
  } catch (const Error&) {
  }
}

// Every engine test derives from this: async mode, no bounds, no memory limit, a clean
// failure list; settings restored and all work finished afterwards.
class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Engine& e = Engine::get();
    saved_sync_ = e.synchronous();
    saved_ops_ = e.max_inflight_ops();
    saved_bytes_ = e.max_inflight_bytes();
    saved_alloc_ = e.allocation();
    // The engine suite checks allocation at enqueue (the default) unless a test says
    // otherwise, also when TIDE_ALLOC=execution runs the other suites that way.
    e.set_allocation(Allocation::at_enqueue);
    e.set_synchronous(false);
    e.set_max_inflight_ops(0);
    e.set_max_inflight_bytes(0);
    Allocator::get().set_limit(0);
    clear_pending_failures();
  }
  void TearDown() override {
    Engine& e = Engine::get();
    Allocator::get().set_limit(0);
    e.set_max_inflight_ops(saved_ops_);
    e.set_max_inflight_bytes(saved_bytes_);
    e.synchronize();  // gates are open by now: their destructors ran
    clear_pending_failures();
    e.set_synchronous(saved_sync_);
    e.set_allocation(saved_alloc_);
  }

 private:
  bool saved_sync_ = false;
  Allocation saved_alloc_ = Allocation::at_enqueue;
  uint64_t saved_ops_ = 0;
  size_t saved_bytes_ = 0;
};

// Holds streams' workers with the white-box switch StreamImpl::worker_held, as if they
// could not get a core (only threads that sync run their tasks meanwhile); releases them
// when destroyed.
class WorkerHolds {
 public:
  WorkerHolds() = default;
  ~WorkerHolds() { release_all(); }
  WorkerHolds(const WorkerHolds&) = delete;
  WorkerHolds& operator=(const WorkerHolds&) = delete;
  StreamImpl* hold(const Stream& st) {
    StreamImpl* s = st.impl();
    s->worker_held.store(true);
    held_.push_back(s);
    return s;
  }
  static void release(StreamImpl* s) {
    s->worker_held.store(false);
    s->wake();
  }
  void release_all() {
    for (StreamImpl* s : held_) release(s);
    held_.clear();
  }

 private:
  std::vector<StreamImpl*> held_;
};

// ---- watchdog ------------------------------------------------------------------------

class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  Watchdog() : thread_([this] { loop(); }) {}
  ~Watchdog() override { stop(); }
  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard lock(mu_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = std::chrono::steady_clock::now() + kWatchdogLimit;
    armed_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard lock(mu_);
    armed_ = false;
  }
  void OnTestProgramEnd(const ::testing::UnitTest&) override { stop(); }

 private:
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (armed_ && std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr, "watchdog: %s still running after %lld s; aborting (a hang)\n",
                     name_.c_str(), static_cast<long long>(kWatchdogLimit.count()));
        std::fflush(stderr);
        std::abort();
      }
      if (armed_) cv_.wait_until(lock, deadline_);
      else cv_.wait(lock);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_{};
  bool armed_ = false, stop_ = false;
  std::thread thread_;
};

inline bool install_watchdog() {
  ::testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
  return true;
}
inline const bool kWatchdogInstalled = install_watchdog();

}  // namespace tide::testing_support
