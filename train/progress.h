// A one-line terminal progress bar: "label [#####.....] 42/100 3.1s eta 4.2s loss 0.42",
// redrawn in place with '\r' at most ~10 times per second and finished with a newline by
// finish() or the destructor. The optional status text at the end ("loss 0.42") is the
// caller's: the bar never reads a tensor, so it never syncs. It prints nothing at all when
// disabled, which by default means stderr is not a terminal (logs and CI stay clean).
//
// Not done here: thread safety (one thread drives a bar), terminal-width detection (the bar
// is a fixed 30 cells wide), or nested bars.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace tide::train {

class ProgressBar {
 public:
  // Draws on stderr when stderr is a terminal (isatty), else stays silent.
  ProgressBar(std::string label, int64_t total);
  // Draws on `out` when `enabled` (tests force a bar on with a std::ostringstream).
  ProgressBar(std::string label, int64_t total, std::ostream& out, bool enabled);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar();

  // Records `done` items (clamped to [0, total]); redraws only when 100 ms have passed since
  // the last draw or the bar just became full, so calling it every step is cheap.
  void update(int64_t done);
  // Sets the text shown after the counts (empty: none), e.g. "loss 0.42". Drawn at the next
  // update() or finish(); an update() with an unchanged count still redraws for it (within
  // the same rate limit). Ignored once finished.
  void set_status(std::string status);
  // Draws the final state and ends the line; later calls do nothing.
  void finish();
  bool enabled() const { return enabled_; }

 private:
  using Clock = std::chrono::steady_clock;
  void draw();

  std::string label_;
  std::string status_;
  bool status_drawn_ = true;  // false while status_ changed since the last draw
  int64_t total_;
  std::ostream* out_;
  bool enabled_;
  bool finished_ = false;
  bool drawn_ = false;
  int64_t done_ = 0;
  int64_t drawn_done_ = -1;
  size_t last_len_ = 0;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace tide::train
