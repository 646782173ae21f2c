// SVG charts: the document is parsed by a small strict XML reader (balanced, properly nested
// tags; quoted, unique attributes; only the five predefined entities) and then queried.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/plot.h"

namespace tide::train {
namespace {

struct Node {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // unescaped character data directly inside this element
  std::vector<std::unique_ptr<Node>> kids;
};

class XmlReader {
 public:
  explicit XmlReader(const std::string& s) : s_(s) {}

  // Throws std::runtime_error naming the offset on any well-formedness problem.
  std::unique_ptr<Node> parse() {
    if (s_.compare(0, 5, "<?xml") == 0) {
      size_t e = s_.find("?>");
      if (e == std::string::npos) fail("unterminated prolog");
      i_ = e + 2;
    }
    skip_ws();
    auto root = element();
    skip_ws();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("XML error at " + std::to_string(i_) + ": " + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  static bool name_start(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  }
  static bool name_char(char c) {
    return name_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  }
  std::string name() {
    if (i_ >= s_.size() || !name_start(s_[i_])) fail("expected a name");
    size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }
  // Character data up to `stop`, with entities resolved; '<' inside is an error.
  std::string chars(char stop) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != stop) {
      char c = s_[i_];
      if (c == '<') fail("raw '<' in character data");
      if (c == '&') {
        size_t e = s_.find(';', i_);
        if (e == std::string::npos) fail("unterminated entity");
        std::string ent = s_.substr(i_ + 1, e - i_ - 1);
        static const std::map<std::string, char> kEnt = {
            {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
        auto it = kEnt.find(ent);
        if (it == kEnt.end()) fail("unknown entity &" + ent + ";");
        out += it->second;
        i_ = e + 1;
      } else {
        out += c;
        ++i_;
      }
    }
    return out;
  }
  std::unique_ptr<Node> element() {
    if (i_ >= s_.size() || s_[i_] != '<') fail("expected '<'");
    ++i_;
    auto n = std::make_unique<Node>();
    n->name = name();
    for (;;) {
      size_t before = i_;
      skip_ws();
      if (i_ >= s_.size()) fail("unterminated start tag");
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return n;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      if (i_ == before) fail("attributes must be separated by whitespace");
      std::string key = name();
      if (i_ >= s_.size() || s_[i_] != '=') fail("attribute without '='");
      ++i_;
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("unquoted attribute");
      char q = s_[i_++];
      std::string v = chars(q);
      if (i_ >= s_.size()) fail("unterminated attribute value");
      ++i_;
      if (!n->attrs.emplace(key, v).second) fail("duplicate attribute " + key);
    }
    for (;;) {
      n->text += chars('<');
      if (i_ >= s_.size()) fail("unclosed element <" + n->name + ">");
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        std::string close = name();
        if (close != n->name) fail("</" + close + "> closes <" + n->name + ">");
        skip_ws();
        if (i_ >= s_.size() || s_[i_] != '>') fail("bad end tag");
        ++i_;
        return n;
      }
      n->kids.push_back(element());
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

std::unique_ptr<Node> parse(const std::string& s) { return XmlReader(s).parse(); }

void collect(const Node& n, const std::string& name, std::vector<const Node*>& out) {
  if (n.name == name) out.push_back(&n);
  for (const auto& k : n.kids) collect(*k, name, out);
}
std::vector<const Node*> all(const Node& root, const std::string& name) {
  std::vector<const Node*> out;
  collect(root, name, out);
  return out;
}
std::vector<const Node*> with_class(const Node& root, const std::string& name,
                                    const std::string& cls) {
  std::vector<const Node*> out;
  for (const Node* n : all(root, name)) {
    auto it = n->attrs.find("class");
    if (it != n->attrs.end() && it->second == cls) out.push_back(n);
  }
  return out;
}

std::vector<std::pair<double, double>> points(const Node& polyline) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(polyline.attrs.at("points"));
  std::string tok;
  while (in >> tok) {
    size_t comma = tok.find(',');
    out.emplace_back(std::stod(tok.substr(0, comma)), std::stod(tok.substr(comma + 1)));
  }
  return out;
}

Chart line_chart(std::string title, std::vector<Series> series) {
  Chart c;
  c.options.title = std::move(title);
  c.options.x_label = "step";
  c.options.y_label = "loss";
  c.series = std::move(series);
  return c;
}

TEST(XmlReaderTest, RejectsMalformedDocuments) {
  EXPECT_NO_THROW(parse("<a x=\"1\"><b/>t &amp; u</a>"));
  EXPECT_THROW(parse("<a><b></a></b>"), std::runtime_error);
  EXPECT_THROW(parse("<a x=1/>"), std::runtime_error);
  EXPECT_THROW(parse("<a>&nbsp;</a>"), std::runtime_error);
  EXPECT_THROW(parse("<a>a<b</a>"), std::runtime_error);
  EXPECT_THROW(parse("<a>"), std::runtime_error);
  EXPECT_THROW(parse("<a/><b/>"), std::runtime_error);
  EXPECT_THROW(parse("<a x=\"1\" x=\"2\"/>"), std::runtime_error);
  EXPECT_THROW(parse("<a x=\"a<b\"/>"), std::runtime_error);
}

TEST(PlotTest, WellFormedWithOnePolylineAndLegendPerSeries) {
  std::vector<Chart> charts = {
      line_chart("Loss", {{"train", {0, 1, 2, 3}, {2.0, 1.0, 0.5, 0.25}},
                          {"test", {0, 1, 2, 3}, {2.2, 1.3, 0.9, 0.7}}}),
      line_chart("Accuracy", {{"acc", {1, 2, 3}, {0.5, 0.8, 0.9}}}),
  };
  std::string doc = svg(charts);
  auto root = parse(doc);
  EXPECT_EQ(root->name, "svg");
  EXPECT_EQ(root->attrs.at("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_EQ(root->attrs.at("height"), "840");  // stacked: 420 + 420
  EXPECT_EQ(all(*root, "polyline").size(), 3u);
  EXPECT_EQ(with_class(*root, "rect", "plot-area").size(), 2u);

  std::vector<std::string> legend;
  for (const Node* t : with_class(*root, "text", "legend-entry")) legend.push_back(t->text);
  EXPECT_EQ(legend, (std::vector<std::string>{"train", "test", "acc"}));

  std::vector<std::string> titles;
  for (const Node* t : with_class(*root, "text", "title")) titles.push_back(t->text);
  EXPECT_EQ(titles, (std::vector<std::string>{"Loss", "Accuracy"}));
  EXPECT_EQ(with_class(*root, "text", "x-label").at(0)->text, "step");
  EXPECT_EQ(with_class(*root, "text", "y-label").at(0)->text, "loss");

  // Distinct colours within a chart.
  auto lines = all(*root, "polyline");
  EXPECT_NE(lines[0]->attrs.at("stroke"), lines[1]->attrs.at("stroke"));
}

TEST(PlotTest, EscapesText) {
  const std::string nasty = "a<b & \"c\" 'd'>";
  Chart c = line_chart(nasty, {{nasty, {0, 1}, {0, 1}}});
  c.options.x_label = "x & y";
  std::string doc = svg({c});
  EXPECT_EQ(doc.find("a<b"), std::string::npos);
  auto root = parse(doc);
  EXPECT_EQ(with_class(*root, "text", "legend-entry").at(0)->text, nasty);
  EXPECT_EQ(with_class(*root, "text", "title").at(0)->text, nasty);
  EXPECT_EQ(with_class(*root, "text", "x-label").at(0)->text, "x & y");
}

TEST(PlotTest, PointsMapDataRangeToPlotArea) {
  // Nice bounds on purpose (x 0..100, y 0..10): the axes are exactly the data range, so the
  // first point is the bottom-left corner of the plot area and the last the top-right one.
  Chart c = line_chart("t", {{"s", {0, 25, 50, 100}, {0, 4, 7, 10}}});
  c.options.width = 640;
  c.options.height = 300;
  auto root = parse(svg({c}));
  const Node* area = with_class(*root, "rect", "plot-area").at(0);
  double ax = std::stod(area->attrs.at("x")), ay = std::stod(area->attrs.at("y"));
  double aw = std::stod(area->attrs.at("width")), ah = std::stod(area->attrs.at("height"));
  ASSERT_GT(aw, 100);
  ASSERT_GT(ah, 100);
  auto p = points(*all(*root, "polyline").at(0));
  ASSERT_EQ(p.size(), 4u);
  EXPECT_NEAR(p[0].first, ax, 0.01);
  EXPECT_NEAR(p[0].second, ay + ah, 0.01);
  EXPECT_NEAR(p[3].first, ax + aw, 0.01);
  EXPECT_NEAR(p[3].second, ay, 0.01);
  // An interior point follows the same linear map.
  EXPECT_NEAR(p[1].first, ax + 0.25 * aw, 0.01);
  EXPECT_NEAR(p[2].second, ay + ah - 0.7 * ah, 0.01);
}

TEST(PlotTest, SecondChartIsBelowTheFirst) {
  auto root = parse(
      svg({line_chart("a", {{"s", {0, 1}, {0, 1}}}), line_chart("b", {{"s", {0, 1}, {0, 1}}})}));
  auto areas = with_class(*root, "rect", "plot-area");
  ASSERT_EQ(areas.size(), 2u);
  EXPECT_NEAR(std::stod(areas[1]->attrs.at("y")) - std::stod(areas[0]->attrs.at("y")), 420, 0.01);
  auto l = all(*root, "polyline");
  EXPECT_NEAR(points(*l[1])[0].second - points(*l[0])[0].second, 420, 0.01);
}

TEST(PlotTest, TicksAreNiceAndCoverTheData) {
  // Awkward ranges: each axis gets 5..8 ticks, round steps, and the data inside the axis.
  std::vector<std::pair<double, double>> ranges = {
      {0, 1}, {0.013, 0.871}, {3, 3}, {-7.5, 12.25}, {1, 60000}, {0, 2.3e-3}, {100, 101}};
  for (auto [lo, hi] : ranges) {
    SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi));
    auto root = parse(svg({line_chart("t", {{"s", {lo, hi}, {lo, hi}}})}));
    for (const char* cls : {"xtick", "ytick"}) {
      auto ticks = with_class(*root, "text", cls);
      EXPECT_GE(ticks.size(), 5u) << cls;
      EXPECT_LE(ticks.size(), 8u) << cls;
      std::vector<double> v;
      for (const Node* t : ticks) v.push_back(std::stod(t->text));
      double lo_axis = std::string(cls) == "ytick" ? std::min(0.0, lo) : lo;
      EXPECT_LE(v.front(), lo_axis + 1e-9) << cls;
      EXPECT_GE(v.back(), hi - 1e-9) << cls;
      double step = v[1] - v[0];
      for (size_t i = 1; i < v.size(); ++i) {
        EXPECT_NEAR(v[i] - v[i - 1], step, std::abs(step) * 1e-6) << cls;
        EXPECT_NE(ticks[i]->text, ticks[i - 1]->text) << cls;  // enough decimals
      }
      double mant = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
      EXPECT_TRUE(std::abs(mant - 1) < 1e-6 || std::abs(mant - 2) < 1e-6 ||
                  std::abs(mant - 2.5) < 1e-6 || std::abs(mant - 5) < 1e-6)
          << cls << " step " << step;
    }
  }
}

TEST(PlotTest, SkipsNonFinitePoints) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto root = parse(
      svg({line_chart("t", {{"s", {0, 1, 2, 3, 4}, {1, nan, inf, 2, 3}}, {"none", {0}, {nan}}})}));
  auto lines = all(*root, "polyline");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(points(*lines[0]).size(), 3u);
  EXPECT_EQ(points(*lines[1]).size(), 0u);
  std::string doc = svg({line_chart("t", {{"s", {0, 1, 2}, {1, nan, -inf}}})});
  EXPECT_EQ(doc.find("nan"), std::string::npos);
  EXPECT_EQ(doc.find("inf"), std::string::npos);
}

void expect_plot_error(const std::vector<Chart>& charts, const std::string& part) {
  try {
    svg(charts);
    ADD_FAILURE() << "no error; expected " << part;
  } catch (const tide::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[plot] ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(PlotTest, RejectsBadInput) {
  expect_plot_error({}, "no charts");
  expect_plot_error({line_chart("empty", {})}, "no series");
  expect_plot_error({line_chart("t", {{"bad", {0, 1, 2}, {0, 1}}})}, "3 x values but 2 y");
  Chart tiny = line_chart("t", {{"s", {0}, {0}}});
  tiny.options.height = 0;
  expect_plot_error({tiny}, "positive");
}

TEST(PlotTest, ASeriesKeepsItsOwnColourAcrossCharts) {
  EXPECT_EQ(palette_colour(0), "#1f77b4");
  EXPECT_EQ(palette_colour(10), palette_colour(0));
  Series fixed{"fixed", {0, 1}, {0, 1}, palette_colour(3)};
  const std::string doc = svg({line_chart("t", {{"first", {0, 1}, {1, 0}}, fixed})});
  // The first series takes the palette's first colour, the second its own, in the line
  // and in the legend.
  EXPECT_NE(doc.find("stroke=\"#1f77b4\" stroke-width=\"1.5\""), std::string::npos);
  EXPECT_NE(doc.find("stroke=\"" + palette_colour(3) + "\" stroke-width=\"1.5\""),
            std::string::npos);
  EXPECT_NE(doc.find("stroke=\"" + palette_colour(3) + "\" stroke-width=\"2\""), std::string::npos);
  EXPECT_EQ(doc.find(palette_colour(1)), std::string::npos);
}

TEST(PlotTest, WriteSvgRoundTripsAndReportsUnwritablePath) {
  std::vector<Chart> charts = {line_chart("t", {{"s", {0, 1}, {0, 1}}})};
  std::string path = ::testing::TempDir() + "tide_plot_test.svg";
  write_svg(path, charts);
  std::ifstream f(path, std::ios::binary);
  std::stringstream got;
  got << f.rdbuf();
  EXPECT_EQ(got.str(), svg(charts));
  std::remove(path.c_str());

  const std::string bad = "/nonexistent-dir-tide/sub/x.svg";
  try {
    write_svg(bad, charts);
    ADD_FAILURE() << "no error";
  } catch (const tide::Error& e) {
    EXPECT_EQ(std::string(e.what()), "[plot] cannot write " + bad);
  }
}

}  // namespace
}  // namespace tide::train
