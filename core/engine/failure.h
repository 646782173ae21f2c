// Failure: what went wrong inside a queued op. It is stored in every storage the op would
// have written, inherited by ops that read those storages (they are skipped), and
// rethrown as tide::Error by the first sync point that touches one of them (docs/contributing.md,
// Errors).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/source_location.h"

namespace tide {

class Failure {
 public:
  // Creates a failure with one reference held by the caller.
  static Failure* create(std::string op, std::string message, tide::SourceLocation site);

  const std::string& op() const { return op_; }
  const std::string& message() const { return message_; }
  const tide::SourceLocation& site() const { return site_; }
  // Global creation order: the smaller, the earlier.
  uint64_t order() const { return order_; }
  // "[op] message (queued at file:line)"
  std::string what() const;

  // Throws tide::Error with what(), and marks this failure as reported.
  [[noreturn]] void rethrow();
  bool reported() const { return reported_.load(std::memory_order_acquire); }
  void mark_reported() { reported_.store(true, std::memory_order_release); }

  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  Failure(std::string op, std::string message, tide::SourceLocation site, uint64_t order)
      : op_(std::move(op)), message_(std::move(message)), site_(site), order_(order) {}
  std::string op_, message_;
  tide::SourceLocation site_;
  uint64_t order_;
  std::atomic<bool> reported_{false};
  std::atomic<int> refs_{1};
};

// `what` without a leading "[op] " (a tide::Error thrown by op's own kernel), so that the
// failure's message names the op once.
std::string strip_op(std::string_view what, const char* op);

}  // namespace tide
