#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "core/error.h"

namespace tide::train {
namespace {

constexpr int kBarCells = 30;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

// "3.1s", "1m05s", "2h03m".
std::string duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600,
                  static_cast<int>(s) % 3600 / 60);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::string label, int64_t total)
    : ProgressBar(std::move(label), total, std::cerr, isatty(fileno(stderr)) != 0) {}

ProgressBar::ProgressBar(std::string label, int64_t total, std::ostream& out, bool enabled)
    : label_(std::move(label)),
      total_(total),
      out_(&out),
      enabled_(enabled),
      start_(Clock::now()),
      last_draw_(start_) {
  TIDE_CHECK(total >= 0, "progress", "total must be >= 0, got ", total);
}

ProgressBar::~ProgressBar() {
  try {
    finish();
  } catch (...) {  // a destructor must not throw; a broken stream loses the last line only
  }
}

void ProgressBar::update(int64_t done) {
  if (!enabled_ || finished_) return;
  done_ = std::clamp<int64_t>(done, 0, total_);
  if (done_ == drawn_done_ && status_drawn_) return;
  auto now = Clock::now();
  bool became_full = done_ == total_;
  if (drawn_ && !became_full && now - last_draw_ < kRedrawEvery) return;
  draw();
}

void ProgressBar::set_status(std::string status) {
  if (!enabled_ || finished_ || status == status_) return;
  status_ = std::move(status);
  status_drawn_ = false;
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  draw();
  *out_ << '\n';
  out_->flush();
}

void ProgressBar::draw() {
  auto now = Clock::now();
  last_draw_ = now;
  drawn_ = true;
  drawn_done_ = done_;
  status_drawn_ = true;
  double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  int cells = static_cast<int>(frac * kBarCells);
  double elapsed = std::chrono::duration<double>(now - start_).count();

  std::string line = label_ + " [" + std::string(cells, '#') + std::string(kBarCells - cells, '.') +
                     "] " + std::to_string(done_) + "/" + std::to_string(total_) + " " +
                     duration(elapsed);
  if (done_ < total_) {
    line += " eta ";
    line +=
        done_ > 0
            ? duration(elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_))
            : std::string("?");
  }
  if (!status_.empty()) {
    line += ' ';
    line += status_;
  }
  // Blank out the rest of a longer previous line.
  size_t len = line.size();
  if (len < last_len_) line.append(last_len_ - len, ' ');
  last_len_ = len;
  *out_ << '\r' << line;
  out_->flush();
}

}  // namespace tide::train
