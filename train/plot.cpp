#include "train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "train/text_file.h"

namespace tide::train {
namespace {

// Tableau-10: distinct, readable on white; series beyond ten reuse the colours in order.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// Margins around the plot area of one chart, in pixels.
constexpr double kLeft = 75, kRight = 25, kTop = 45, kBottom = 55;

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters other than tab/newline/CR are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += '?';
        else out += c;
    }
  }
  return out;
}

// A coordinate with two decimals: enough for pixels, short documents.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

struct Axis {
  double lo, hi, step;
  int decimals;  // < 0: format tick labels with %g
};

// Nice ticks over [lo, hi]: the smallest step in {1, 2, 2.5, 5} x 10^k giving at most 8
// ticks; the axis is widened to whole steps, so the first and last tick are the bounds.
Axis nice_axis(double lo, double hi) {
  if (!(hi > lo)) {  // one value (or none): open a range around it
    double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  double range = hi - lo;
  double mag = std::pow(10.0, std::floor(std::log10(range / 8)));
  static constexpr double kMults[] = {1, 2, 2.5, 5, 10, 20, 25, 50};
  double step = mag * 100;
  for (double m : kMults) {
    double s = mag * m;
    double n = std::ceil(hi / s - 1e-9) - std::floor(lo / s + 1e-9) + 1;
    if (n <= 8) {
      step = s;
      break;
    }
  }
  Axis a;
  a.step = step;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  // Fewer than 5 ticks (possible after widening): halve the step, it stays nice.
  while (std::llround((a.hi - a.lo) / a.step) + 1 < 5) a.step /= 2;
  double big = std::max(std::abs(a.lo), std::abs(a.hi));
  if (big >= 1e6 || a.step < 1e-4) {
    a.decimals = -1;
  } else {
    int d = static_cast<int>(std::ceil(-std::log10(a.step) - 1e-9));
    // 2.5 x 10^k needs one digit more than 10^k.
    double lead = a.step / std::pow(10.0, std::floor(std::log10(a.step) + 1e-9));
    if (std::abs(lead - 2.5) < 1e-6) d += 1;
    a.decimals = std::max(0, d);
  }
  return a;
}

std::string tick_label(const Axis& a, double v) {
  if (std::abs(v) < a.step * 1e-9) v = 0;  // no "-0.00"
  char buf[48];
  if (a.decimals < 0) std::snprintf(buf, sizeof buf, "%.4g", v);
  else std::snprintf(buf, sizeof buf, "%.*f", a.decimals, v);
  return buf;
}

bool finite(double x, double y) { return std::isfinite(x) && std::isfinite(y); }

std::string colour_of(const Series& s, size_t k) {
  return s.colour.empty() ? kPalette[k % kPaletteSize] : escape(s.colour);
}

void render(std::ostringstream& o, const Chart& chart, double y0) {
  const ChartOptions& opt = chart.options;
  const double w = opt.width, h = opt.height;
  const double px = kLeft, pw = std::max(10.0, w - kLeft - kRight);
  const double py = y0 + kTop, ph = std::max(10.0, h - kTop - kBottom);

  // Data range over the finite points; y starts at min(0, ymin).
  double xmin = INFINITY, xmax = -INFINITY, ymin = 0, ymax = -INFINITY;
  for (const Series& s : chart.series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (finite(s.x[i], s.y[i])) {
        xmin = std::min(xmin, s.x[i]);
        xmax = std::max(xmax, s.x[i]);
        ymin = std::min(ymin, s.y[i]);
        ymax = std::max(ymax, s.y[i]);
      }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1;
  if (!std::isfinite(ymax)) ymax = 1;
  const Axis ax = nice_axis(xmin, xmax), ay = nice_axis(ymin, ymax);
  auto sx = [&](double x) { return px + (x - ax.lo) / (ax.hi - ax.lo) * pw; };
  auto sy = [&](double y) { return py + ph - (y - ay.lo) / (ay.hi - ay.lo) * ph; };

  o << "<g class=\"chart\">\n";
  o << "<rect class=\"frame\" x=\"0.5\" y=\"" << num(y0 + 0.5) << "\" width=\"" << num(w - 1)
    << "\" height=\"" << num(h - 1) << "\" fill=\"white\" stroke=\"#cccccc\"/>\n";
  o << "<text class=\"title\" x=\"" << num(px + pw / 2) << "\" y=\"" << num(y0 + 26)
    << "\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" << escape(opt.title)
    << "</text>\n";

  // Grid lines and tick labels.
  o << "<g class=\"ticks\" font-size=\"11\" fill=\"#333333\">\n";
  int nx = static_cast<int>(std::llround((ax.hi - ax.lo) / ax.step));
  for (int i = 0; i <= nx; ++i) {
    double v = ax.lo + i * ax.step, x = sx(v);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(py) << "\" x2=\"" << num(x) << "\" y2=\""
      << num(py + ph + 5) << "\" stroke=\"#e5e5e5\"/>\n";
    o << "<text class=\"xtick\" x=\"" << num(x) << "\" y=\"" << num(py + ph + 18)
      << "\" text-anchor=\"middle\">" << tick_label(ax, v) << "</text>\n";
  }
  int ny = static_cast<int>(std::llround((ay.hi - ay.lo) / ay.step));
  for (int i = 0; i <= ny; ++i) {
    double v = ay.lo + i * ay.step, y = sy(v);
    o << "<line x1=\"" << num(px - 5) << "\" y1=\"" << num(y) << "\" x2=\"" << num(px + pw)
      << "\" y2=\"" << num(y) << "\" stroke=\"#e5e5e5\"/>\n";
    o << "<text class=\"ytick\" x=\"" << num(px - 8) << "\" y=\"" << num(y + 4)
      << "\" text-anchor=\"end\">" << tick_label(ay, v) << "</text>\n";
  }
  o << "</g>\n";

  // The plot area on top of the grid: its frame doubles as the axes.
  o << "<rect class=\"plot-area\" x=\"" << num(px) << "\" y=\"" << num(py) << "\" width=\""
    << num(pw) << "\" height=\"" << num(ph) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  o << "<text class=\"x-label\" x=\"" << num(px + pw / 2) << "\" y=\"" << num(py + ph + 42)
    << "\" text-anchor=\"middle\" font-size=\"13\">" << escape(opt.x_label) << "</text>\n";
  double lx = 18, ly = py + ph / 2;
  o << "<text class=\"y-label\" x=\"" << num(lx) << "\" y=\"" << num(ly)
    << "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 " << num(lx) << " "
    << num(ly) << ")\">" << escape(opt.y_label) << "</text>\n";

  // One polyline per series, clipped by nothing: the axes cover every finite point.
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    o << "<polyline class=\"series\" fill=\"none\" stroke=\"" << colour_of(chart.series[k], k)
      << "\" stroke-width=\"1.5\" points=\"";
    bool first = true;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!finite(s.x[i], s.y[i])) continue;
      if (!first) o << ' ';
      first = false;
      o << num(sx(s.x[i])) << ',' << num(sy(s.y[i]));
    }
    o << "\"/>\n";
  }

  // Legend: top-right inside the plot area, on a translucent box.
  size_t longest = 0;
  for (const Series& s : chart.series) longest = std::max(longest, s.name.size());
  double bw = 34 + 7.0 * static_cast<double>(longest), bh = 8 + 18.0 * chart.series.size();
  double bx = px + pw - bw - 8, by = py + 8;
  o << "<g class=\"legend\" font-size=\"12\">\n";
  o << "<rect x=\"" << num(bx) << "\" y=\"" << num(by) << "\" width=\"" << num(bw) << "\" height=\""
    << num(bh) << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
  for (size_t k = 0; k < chart.series.size(); ++k) {
    double ry = by + 4 + 18.0 * k + 9;
    o << "<line x1=\"" << num(bx + 6) << "\" y1=\"" << num(ry) << "\" x2=\"" << num(bx + 24)
      << "\" y2=\"" << num(ry) << "\" stroke=\"" << colour_of(chart.series[k], k)
      << "\" stroke-width=\"2\"/>\n";
    o << "<text class=\"legend-entry\" x=\"" << num(bx + 28) << "\" y=\"" << num(ry + 4) << "\">"
      << escape(chart.series[k].name) << "</text>\n";
  }
  o << "</g>\n</g>\n";
}

}  // namespace

std::string palette_colour(size_t k) { return kPalette[k % kPaletteSize]; }

std::string svg(const std::vector<Chart>& charts) {
  TIDE_CHECK(!charts.empty(), "plot", "no charts to draw");
  int width = 0, height = 0;
  for (size_t c = 0; c < charts.size(); ++c) {
    const Chart& ch = charts[c];
    TIDE_CHECK(ch.options.width > 0 && ch.options.height > 0, "plot", "chart ", c, " (\"",
               ch.options.title, "\") has size ", ch.options.width, "x", ch.options.height,
               "; expected positive width and height");
    TIDE_CHECK(!ch.series.empty(), "plot", "chart ", c, " (\"", ch.options.title,
               "\") has no series");
    for (const Series& s : ch.series)
      TIDE_CHECK(s.x.size() == s.y.size(), "plot", "series \"", s.name, "\" in chart ", c, " has ",
                 s.x.size(), " x values but ", s.y.size(), " y values");
    width = std::max(width, ch.options.width);
    height += ch.options.height;
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height
    << "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  double y0 = 0;
  for (const Chart& ch : charts) {
    render(o, ch, y0);
    y0 += ch.options.height;
  }
  o << "</svg>\n";
  return o.str();
}

void write_svg(const std::string& path, const std::vector<Chart>& charts) {
  write_text_file(path, svg(charts), "plot");  // svg() validates before the file is touched
}

}  // namespace tide::train
