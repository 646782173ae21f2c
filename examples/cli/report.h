// Shared helpers of the `tide` command: a steady-clock stopwatch, the median of repeated
// runs, human units (s, ms, µs, ns) and a plain-text table. Output only: nothing here
// touches tide or waits for anything.
#pragma once

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace tide::cli {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since t0.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The median of xs (the mean of the two middle values for an even count); 0 when empty.
double median(std::vector<double> xs);

// "1.23 s", "12.3 ms", "4.56 us", "78.0 ns": three significant digits in the largest unit
// that keeps the value >= 1.
std::string format_seconds(double s);
// "%.*f" of x.
std::string format_fixed(double x, int decimals);

// A table of strings printed with aligned columns, numbers right-aligned:
//   Table t("S1 title", {"what", "time"}); t.row({"tide", "1 ms"}); t.print();
class Table {
 public:
  Table(std::string title, std::vector<std::string> header);
  void row(std::vector<std::string> cells);
  // A line of text printed under the table (what was measured, how often).
  void note(std::string text);
  void print() const { print(std::cout); }
  void print(std::ostream& out) const;

 private:
  std::string title_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> notes_;
};

}  // namespace tide::cli
