// Line charts as a self-contained SVG document, for loss and accuracy curves written by the
// trainer and the examples. No plotting library: the document is built as text, and every
// piece of user text (titles, labels, series names) is XML-escaped.
//
// Not done here: log scales, markers, error bands, or text-width measurement (the legend box
// is sized from the character count, so very wide glyphs may overrun it).
#pragma once

#include <string>
#include <vector>

namespace tide::train {

// One line; x.size() == y.size(). Points where x or y is NaN or infinite are skipped.
struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string colour = {};  // a CSS colour; empty: the palette's colour of the series' position
};

// The palette's k-th colour (Tableau-10, repeating): a series keeps its colour across
// charts that show different subsets by setting it.
std::string palette_colour(size_t k);

struct ChartOptions {
  std::string title, x_label, y_label;
  int width = 800;
  int height = 420;
};

struct Chart {
  ChartOptions options;
  std::vector<Series> series;
};

// An SVG document with the charts stacked vertically: per chart a frame, axes with 5-8
// "nice" ticks and tick labels on both axes (auto-scaled to the data, y from min(0, ymin)),
// axis labels as given, a title, one <polyline> per series (distinct colours from a fixed
// palette) and a legend naming each series. The plot area of each chart is the <rect> with
// class="plot-area". Throws tide::Error("[plot] ...") when there are no charts, a chart has
// no series, a series' x and y sizes differ, or a size is not positive.
std::string svg(const std::vector<Chart>& charts);

// svg() written to path; throws tide::Error("[plot] cannot write <path>") on I/O errors.
void write_svg(const std::string& path, const std::vector<Chart>& charts);

}  // namespace tide::train
