// CollectiveWatchdog (dist/watchdog.h).
#include "dist/watchdog.h"

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <string>

#include "core/error.h"

namespace tide::dist {

CollectiveWatchdog::CollectiveWatchdog(int rank, std::chrono::milliseconds timeout)
    : rank_(rank), timeout_(timeout) {}

uint64_t CollectiveWatchdog::queued(const char* op, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t t = next_++;
  pending_.push_back({t, op, now});
  return t;
}

void CollectiveWatchdog::done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [ticket](const Pending& p) { return p.ticket == ticket; });
  if (it != pending_.end()) pending_.erase(it);
}

std::string CollectiveWatchdog::check(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fired_.empty() || timeout_.count() == 0 || pending_.empty()) return fired_;
  // The oldest pending collective is the first to pass its deadline.
  const Pending& p = pending_.front();
  if (now - p.queued <= timeout_) return "";
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.queued);
  std::ostringstream m;
  m << std::fixed << std::setprecision(1) << "the collective " << p.op << " queued on rank "
    << rank_ << " did not complete within " << double(timeout_.count()) / 1000 << " s (waited "
    << double(waited.count()) / 1000
    << " s; TIDE_NCCL_TIMEOUT sets the limit in seconds): another rank skipped it, hangs or "
       "died; the communicator was aborted, make a new group to go on";
  fired_ = m.str();
  pending_.clear();
  return fired_;
}

bool CollectiveWatchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !fired_.empty();
}

size_t CollectiveWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

std::chrono::milliseconds CollectiveWatchdog::timeout_from_env() {
  const char* v = std::getenv("TIDE_NCCL_TIMEOUT");
  if (!v) return std::chrono::seconds(600);
  const std::string s(v);
  const bool digits = !s.empty() && s.size() <= 5 &&
                      std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  const long seconds = digits ? std::atol(s.c_str()) : -1;
  TIDE_CHECK(seconds >= 0 && seconds <= 86400, "dist",
             "TIDE_NCCL_TIMEOUT needs whole seconds from 0 (off) to 86400, got '", s, "'");
  return std::chrono::seconds(seconds);
}

}  // namespace tide::dist
