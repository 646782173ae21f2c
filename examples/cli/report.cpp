// Table printing and unit formatting for the `tide` command.
#include "examples/cli/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace tide::cli {

double median(std::vector<double> xs) {
  if (xs.empty()) return 0.0;
  std::sort(xs.begin(), xs.end());
  size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

std::string format_fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string format_seconds(double s) {
  struct Unit {
    double scale;
    const char* name;
  };
  static constexpr Unit units[] = {{1.0, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};
  double a = std::fabs(s);
  for (const Unit& u : units) {
    if (a >= u.scale || u.scale == 1e-9) {
      double v = s / u.scale;
      // Three significant digits: 1.23, 12.3, 123.
      int decimals = std::fabs(v) >= 100 ? 0 : std::fabs(v) >= 10 ? 1 : 2;
      return format_fixed(v, decimals) + " " + u.name;
    }
  }
  return format_fixed(s, 3) + " s";
}

Table::Table(std::string title, std::vector<std::string> header)
    : title_(std::move(title)), header_(std::move(header)) {}

void Table::row(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

void Table::note(std::string text) { notes_.push_back(std::move(text)); }

namespace {
// Columns whose cells start with a digit or a sign (apart from the header) align right.
bool looks_numeric(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' ||
                        s[0] == '+' || s[0] == '~');
}
// Display width, counting a UTF-8 sequence as one column.
size_t width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}
}  // namespace

void Table::print(std::ostream& os) const {
  std::vector<size_t> w(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) w[c] = width(header_[c]);
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], width(r[c]));
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string text = "| ";
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(w[c] - width(cells[c]), ' ');
      text += (!header && looks_numeric(cells[c])) ? pad + cells[c] : cells[c] + pad;
      text += c + 1 < cells.size() ? " | " : " |";
    }
    os << text << "\n";
  };
  os << "\n" << title_ << "\n";
  line(header_, true);
  std::string sep = "|";
  for (size_t c = 0; c < w.size(); ++c) sep += std::string(w[c] + 2, '-') + "|";
  os << sep << "\n";
  for (const auto& r : rows_) line(r, false);
  for (const auto& n : notes_) os << "  " << n << "\n";
  os.flush();
}

}  // namespace tide::cli
