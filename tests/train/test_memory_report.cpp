// The memory report (train/memory_report.h) and the roles the layers give blocks: a
// training step's parameters, gradients, optimizer state and activations, a traced step's
// arena; the timeline of a hand-made recording (peak, sites at the peak, marks); the HTML
// page self-contained; and the page in a real browser: headless Chromium loads it without
// a console message, its script runs, and its screenshot shows the plot (skipped, saying
// so, where Chromium is missing).
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "error_of.h"
#include "tide.h"
#include "trace/trace.h"
#include "train/memory_report.h"
#include "train_rig.h"

namespace tide {
namespace {

using memory::Role;

struct Recording {
  Recording() { memory::start(); }
  ~Recording() { memory::stop(); }
};

std::array<size_t, memory::kNumRoles> bytes_by_role(const memory::Snapshot& s) {
  std::array<size_t, memory::kNumRoles> by{};
  for (const memory::Block& b : s.blocks) by[size_t(b.role)] += b.bytes;
  return by;
}

size_t param_block_bytes(nn::Module& m) {
  size_t n = 0;
  for (const Tensor& p : m.parameters()) n += Allocator::round_size(p.nbytes());
  return n;
}

// With outputs allocated at enqueue or at execution: in the latter the blocks are taken by
// the worker when each op runs, and take the roles noted for their storages on the
// frontend's thread (a module's tag, an optimizer's scope, a recorded op's outputs).
void check_training_step_roles(Allocation alloc) {
  const AllocationGuard scope(alloc);
  Recording rec;
  test_util::TrainRig r = test_util::make_rig({.sizes = {32, 64, 64, 4}, .adam = true});
  Tensor x = randn({16, 32}), y = randn({16, 4});
  Tensor loss = nn::l2_loss(r.model->forward(x), y);
  wait_all();
  memory::Snapshot fwd = memory::snapshot();
  auto by = bytes_by_role(fwd);
  const size_t params = param_block_bytes(*r.model);
  EXPECT_EQ(by[size_t(Role::parameter)], params);
  // The two hidden activations (16 x 64 floats each) at least.
  EXPECT_GE(by[size_t(Role::activation)], 2 * Allocator::round_size(16 * 64 * 4));
  bool linear_site = false;
  for (const memory::Block& b : fwd.blocks)
    if (b.role == Role::activation && b.site >= 0 && fwd.sites[size_t(b.site)].op == "linear")
      linear_site = true;
  EXPECT_TRUE(linear_site);
  loss.backward();
  r.opt->step();
  loss = Tensor();
  wait_all();
  Engine::get().reclaim();
  memory::Snapshot after = memory::snapshot();
  by = bytes_by_role(after);
  EXPECT_EQ(by[size_t(Role::parameter)], params);
  EXPECT_EQ(by[size_t(Role::gradient)], params);
  // Adam: m and v per parameter, the step count and the learning rate (0-d tensors).
  EXPECT_EQ(by[size_t(Role::optimizer_state)], 2 * params + 2 * Allocator::round_size(8));
  // The graph was freed by backward(): what the forward ran on stays, while held.
  EXPECT_EQ(by[size_t(Role::activation)], x.storage()->bytes() + y.storage()->bytes());
  x = y = Tensor();
  Engine::get().reclaim();
  memory::Snapshot dropped = memory::snapshot();
  for (const memory::Block& b : dropped.blocks)
    EXPECT_NE(b.role, Role::activation)
        << b.bytes << " bytes from " << (b.site >= 0 ? dropped.sites[size_t(b.site)].op : "?");
}

TEST(MemoryRoles, ATrainingStepsParametersGradientsStateAndActivations) {
  check_training_step_roles(Allocation::at_enqueue);
}

TEST(MemoryRoles, TheSameRolesWithOutputsAllocatedAtExecution) {
  check_training_step_roles(Allocation::at_execution);
}

TEST(MemoryRoles, ATracedStepsArena) {
  test_util::TrainRig r = test_util::make_rig({.sizes = {16, 32, 4}});
  Tensor x = randn({8, 16}), y = randn({8, 4});
  auto step = trace::function(
      [&](const Tensor& a, const Tensor& b) { return test_util::train_step(r, a, b); },
      {.name = "memory_roles_step", .warmup_calls = 1});
  Recording rec;
  for (int i = 0; i < 3; ++i) step(x, y);
  wait_all();
  memory::Snapshot s = memory::snapshot();
  const trace::FunctionStats st = step.stats();
  ASSERT_GT(st.arena_bytes, 0u);
  EXPECT_GE(bytes_by_role(s)[size_t(Role::trace_arena)], st.arena_bytes);
}

// A recording made by hand: two parameters, activations up to a peak, then freed.
memory::Snapshot hand_made() {
  memory::Snapshot s;
  s.sites = {{"randn", "/src/model.cpp", 10, 0}, {"matmul", "/src/model.cpp", 20, 0}};
  s.marks = {"step 1"};
  auto ev = [&](int64_t t_ms, memory::EventKind k, uint64_t block, uint64_t bytes, Role role,
                uint32_t site = 0, uint64_t queued = 0) {
    memory::Event e;
    e.t_ns = t_ms * 1'000'000;
    e.kind = k;
    e.block = block;
    e.bytes = bytes;
    e.role = role;
    e.site = site;
    e.queued_bytes = queued;
    s.events.push_back(e);
  };
  using K = memory::EventKind;
  ev(0, K::take, 1, 1000, Role::temporary);
  ev(1, K::site, 1, 1000, Role::temporary, 0);
  memory::Event retag;
  retag.t_ns = 2'000'000;
  retag.kind = K::retag;
  retag.block = 1;
  retag.bytes = 1000;
  retag.from = Role::temporary;
  retag.role = Role::parameter;
  s.events.push_back(retag);
  ev(3, K::take, 2, 4000, Role::temporary, 0, 4000);
  ev(4, K::site, 2, 4000, Role::temporary, 1, 4000);
  ev(5, K::take, 3, 6000, Role::temporary, 0, 10000);
  ev(6, K::site, 3, 6000, Role::temporary, 1, 10000);
  ev(7, K::free, 2, 4000, Role::temporary);
  ev(8, K::mark, 0, 0, Role::temporary, 0);
  ev(9, K::free, 3, 6000, Role::temporary);
  return s;
}

TEST(MemoryReport, TheTimelineOfAHandMadeRecording) {
  memory::Snapshot s = hand_made();
  train::MemoryTimeline t = train::memory_timeline(s);
  EXPECT_EQ(t.peak_bytes, 11000u);
  EXPECT_NEAR(t.peak_t_s, 0.005, 1e-12);
  EXPECT_EQ(t.peak_by_role[size_t(Role::parameter)], 1000u);
  EXPECT_EQ(t.peak_by_role[size_t(Role::temporary)], 10000u);
  ASSERT_EQ(t.sites_at_peak.size(), 2u);
  EXPECT_EQ(t.sites_at_peak[0].op, "matmul");
  EXPECT_EQ(t.sites_at_peak[0].line, 20u);
  EXPECT_EQ(t.sites_at_peak[0].bytes, 10000u);
  EXPECT_EQ(t.sites_at_peak[0].blocks, 2u);
  EXPECT_EQ(t.sites_at_peak[1].role, Role::parameter);
  ASSERT_EQ(t.marks.size(), 1u);
  EXPECT_EQ(t.marks[0].second, "step 1");
  // The envelope keeps the peak, and the last point is back to the parameter alone.
  double highest = 0;
  for (size_t i = 0; i < t.t_s.size(); ++i) {
    double sum = 0;
    for (const auto& v : t.role_bytes) sum += v[i];
    highest = std::max(highest, sum);
  }
  EXPECT_EQ(highest, 11000.0);
  EXPECT_EQ(t.role_bytes[size_t(Role::parameter)].back(), 1000.0);
  EXPECT_EQ(t.role_bytes[size_t(Role::temporary)].back(), 0.0);
  EXPECT_EQ(t.queued_bytes.size(), t.t_s.size());
}

TEST(MemoryReport, AnEmptyRecordingIsRefusedWithAReason) {
  memory::Snapshot s;
  EXPECT_TIDE_ERROR(train::memory_timeline(s), "memory_report", "no allocation on cpu");
  EXPECT_TIDE_ERROR(train::memory_report_html(s), "memory_report", "memory::start()");
}

TEST(MemoryReport, TheHtmlPageNeedsNothingFromTheNetwork) {
  memory::Snapshot s = hand_made();
  s.sites[0].file = "/src/<odd>&name.cpp";
  train::MemoryReportOptions o;
  o.command = "tide train --x \"<y>\"";
  const std::string html = train::memory_report_html(s, o);
  // The one address is the SVG namespace's, a name that is never fetched.
  size_t addresses = 0;
  for (size_t p = html.find("http"); p != std::string::npos; p = html.find("http", p + 1)) {
    EXPECT_EQ(html.compare(p, 26, "http://www.w3.org/2000/svg"), 0) << html.substr(p, 40);
    ++addresses;
  }
  EXPECT_EQ(addresses, 1u);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("&lt;odd&gt;&amp;name.cpp:10"), std::string::npos);
  EXPECT_NE(html.find("&quot;&lt;y&gt;&quot;"), std::string::npos);
  EXPECT_EQ(html.find("<y>"), std::string::npos);
  const std::string svg = train::memory_timeline_svg(train::memory_timeline(s), o);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("peak 0.01 MB"), std::string::npos);
  EXPECT_NE(svg.find("class=\"queued\""), std::string::npos);
}

// ---- in a real browser ----------------------------------------------------------------

std::string find_chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (std::filesystem::exists(p)) return p;
  return {};
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint32_t be32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

// An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) as RGBA pixels.
struct Image {
  uint32_t w = 0, h = 0;
  std::vector<unsigned char> rgba;
};
Image decode_png(const std::string& file) {
  const auto* d = reinterpret_cast<const unsigned char*>(file.data());
  EXPECT_GT(file.size(), 33u);
  EXPECT_EQ(file.compare(1, 3, "PNG"), 0);
  Image img;
  std::string idat;
  int channels = 0;
  for (size_t i = 8; i + 12 <= file.size();) {
    const uint32_t len = be32(d + i);
    const std::string type = file.substr(i + 4, 4);
    if (type == "IHDR") {
      img.w = be32(d + i + 8);
      img.h = be32(d + i + 12);
      EXPECT_EQ(d[i + 16], 8) << "bit depth";
      channels = d[i + 17] == 6 ? 4 : d[i + 17] == 2 ? 3 : 0;
      EXPECT_NE(channels, 0) << "colour type " << int(d[i + 17]);
      EXPECT_EQ(d[i + 20], 0) << "interlaced";
    } else if (type == "IDAT") {
      idat.append(file, i + 8, len);
    }
    i += 12 + len;
  }
  if (channels == 0) return img;
  const size_t stride = size_t(img.w) * size_t(channels);
  std::vector<unsigned char> raw((stride + 1) * img.h);
  uLongf raw_len = uLongf(raw.size());
  EXPECT_EQ(uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()),
                       uLong(idat.size())),
            Z_OK);
  std::vector<unsigned char> prev(stride, 0), cur(stride);
  img.rgba.resize(size_t(img.w) * img.h * 4);
  for (uint32_t y = 0; y < img.h; ++y) {
    const unsigned char* row = raw.data() + y * (stride + 1);
    const int filter = row[0];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(channels) ? cur[x - size_t(channels)] : 0, b = prev[x],
                c = x >= size_t(channels) ? prev[x - size_t(channels)] : 0;
      int pred = 0;
      switch (filter) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: break;
      }
      cur[x] = static_cast<unsigned char>(row[1 + x] + pred);
    }
    for (uint32_t x = 0; x < img.w; ++x)
      for (int k = 0; k < 4; ++k)
        img.rgba[(size_t(y) * img.w + x) * 4 + size_t(k)] =
            k < channels ? cur[x * size_t(channels) + size_t(k)] : 255;
    prev = cur;
  }
  return img;
}

size_t pixels_of(const Image& img, unsigned r, unsigned g, unsigned b) {
  size_t n = 0;
  for (size_t i = 0; i + 3 < img.rgba.size(); i += 4)
    n += std::abs(int(img.rgba[i]) - int(r)) <= 3 && std::abs(int(img.rgba[i + 1]) - int(g)) <= 3 &&
         std::abs(int(img.rgba[i + 2]) - int(b)) <= 3;
  return n;
}

TEST(MemoryReportInABrowser, LoadsWithoutAConsoleMessageAndShowsThePlot) {
  const std::string chromium = find_chromium();
  if (chromium.empty())
    GTEST_SKIP() << "no Chromium (Debian: apt-get install chromium): the report is not checked "
                    "in a browser";
  // A real recording: a few eager training steps of a small MLP. The cache is emptied
  // first: blocks earlier tests left there are drawn as cached bytes and would set the
  // scale, flattening this small model's bands.
  wait_all();
  Engine::get().reclaim();
  Allocator::get().empty_cache();
  memory::start();
  test_util::TrainRig r = test_util::make_rig({.sizes = {64, 256, 256, 8}, .adam = true});
  Tensor x = randn({128, 64}), y = randn({128, 8});
  for (int i = 0; i < 4; ++i) {
    test_util::train_step(r, x, y).item<float>();
    memory::mark("step " + std::to_string(i + 1));
  }
  wait_all();
  memory::stop();
  const std::string dir = testing::TempDir() + "tide_memory_report_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string html = dir + "/report.html", png = dir + "/shot.png", log = dir + "/log.txt",
                    dom = dir + "/dom.html";
  train::MemoryReportOptions o;
  o.command = "MemoryReportInABrowser";
  train::write_memory_report(html, memory::snapshot(), o);
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --no-first-run "
      "--user-data-dir=" +
      dir + "/profile --window-size=1200,900 ";
  const std::string shot = chromium + flags + "--enable-logging=stderr --v=0 --screenshot=" + png +
                           " file://" + html + " > " + log + " 2>&1";
  ASSERT_EQ(std::system(shot.c_str()), 0) << read_all(log);
  // Every console message of the page (an uncaught error is one) is logged as CONSOLE.
  const std::string messages = read_all(log);
  EXPECT_EQ(messages.find("CONSOLE"), std::string::npos) << messages;
  const std::string dump =
      chromium + flags + "--dump-dom file://" + html + " > " + dom + " 2>/dev/null";
  ASSERT_EQ(std::system(dump.c_str()), 0);
  EXPECT_NE(read_all(dom).find("data-rendered=\"ok\""), std::string::npos)
      << "the page's script did not run to its end";
  const Image img = decode_png(read_all(png));
  ASSERT_EQ(img.w, 1200u);
  // The parameters' and the activations' bands are on screen (their colours, in pixels).
  EXPECT_GT(pixels_of(img, 0x1f, 0x77, 0xb4), 500u) << "parameter band";
  EXPECT_GT(pixels_of(img, 0xff, 0x7f, 0x0e), 500u) << "activation band";
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tide
