// Prefetcher<T>: runs make(0), make(1), ... on one background thread and hands the results
// to one consumer in order, keeping at most `depth` of them ready (a bounded queue, so the
// producer waits for the consumer instead of running ahead without end).
// An exception thrown by make(k) reaches the consumer at the k-th next() (after the results
// before it) and again at every later call; the thread then stops. Destroying the
// Prefetcher stops the thread at once when it waits for room, or after the make() call it
// is in: a consumer may stop early without draining anything.
// Not done here: several producer threads, reordering.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "core/error.h"

namespace tide::text {

template <class T>
class Prefetcher {
 public:
  // Starts the thread. Throws "[prefetch]" unless depth >= 1.
  Prefetcher(std::function<T(uint64_t)> make, int depth) : make_(std::move(make)), depth_(depth) {
    TIDE_CHECK(depth >= 1, "prefetch", "the queue depth must be at least 1, got ", depth);
    thread_ = std::thread([this] { run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next result. Waits for it; rethrows make()'s exception in its place.
  T next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || error_; });
    if (ready_.empty()) std::rethrow_exception(error_);
    T value = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    cv_.notify_all();
    return value;
  }

 private:
  void run() {
    for (uint64_t k = 0;; ++k) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || int(ready_.size()) < depth_; });
        if (stop_) return;
      }
      bool failed = false;
      try {
        T value = make_(k);
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(std::move(value));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        failed = true;
      }
      cv_.notify_all();
      if (failed) return;
    }
  }

  std::function<T(uint64_t)> make_;
  const int depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tide::text
