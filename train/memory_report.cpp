#include "train/memory_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "train/text_file.h"

namespace tide::train {

namespace {

using memory::Event;
using memory::EventKind;
using memory::Role;
constexpr int kRoles = memory::kNumRoles;

// Stacked bottom to top: what lives all run first, then what each step makes.
constexpr Role kStackOrder[kRoles] = {Role::parameter,   Role::optimizer_state, Role::gradient,
                                      Role::trace_arena, Role::activation,      Role::temporary,
                                      Role::workspace};
const char* colour(Role r) {
  switch (r) {
    case Role::parameter: return "#1f77b4";
    case Role::optimizer_state: return "#9467bd";
    case Role::gradient: return "#2ca02c";
    case Role::trace_arena: return "#8c564b";
    case Role::activation: return "#ff7f0e";
    case Role::temporary: return "#bcbd22";
    case Role::workspace: return "#17becf";
  }
  return "#7f7f7f";
}
constexpr const char* kCachedColour = "#d9d9d9";
constexpr const char* kQueuedColour = "#d62728";

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += (static_cast<unsigned char>(c) < 0x20 && c != '\n') ? '?' : c;
    }
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string px(double v) { return fmt("%.1f", v); }
// MB as everywhere in tide's output: 2^20 bytes.
constexpr double kMB = 1024.0 * 1024.0;
std::string mb(double bytes) { return fmt("%.2f", bytes / kMB); }

int8_t device_code(Device d) { return d.is_cpu() ? int8_t(-1) : int8_t(d.index); }

bool on_device(const Event& e, int8_t dev) { return e.kind == EventKind::mark || e.device == dev; }

// A "nice" step for an axis from 0 to hi with about n ticks.
double nice_step(double hi, int n) {
  if (!(hi > 0)) return 1;
  const double raw = hi / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

std::string site_label(const std::string& op, const std::string& file, uint32_t line) {
  if (file.empty()) return op;
  std::string f = file;
  const size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return op + " at " + f + ":" + std::to_string(line);
}

}  // namespace

MemoryTimeline memory_timeline(const memory::Snapshot& s, const MemoryReportOptions& options) {
  const int8_t dev = device_code(options.device);
  struct State {
    Role role;
    uint64_t bytes;
    uint32_t site;
  };
  std::unordered_map<uint64_t, State> live;
  std::array<double, kRoles> bytes{};
  double cached = 0, queued = 0;
  MemoryTimeline t;
  double t_end = 0;
  for (const Event& e : s.events)
    if (on_device(e, dev) && e.kind != EventKind::mark) {
      ++t.events;
      t_end = double(e.t_ns) * 1e-9;
    }
  TIDE_CHECK(t.events > 0, "memory_report", "the recording has no allocation on ",
             options.device.str(), " (", s.events.size(), " events in all; was memory::start() ",
             "called before the work?)");
  const size_t points = std::max<size_t>(options.max_points, 2);
  // Per time slice, the point after the event with the highest total: the envelope keeps
  // every peak however many events a slice has.
  size_t slice = SIZE_MAX, peak_event = 0;
  double slice_best = -1;
  std::array<double, kRoles> best_bytes{};
  double best_cached = 0, best_queued = 0, best_t = 0;
  auto emit = [&] {
    if (slice_best < 0) return;
    t.t_s.push_back(best_t);
    for (int r = 0; r < kRoles; ++r) t.role_bytes[size_t(r)].push_back(best_bytes[size_t(r)]);
    t.cached_bytes.push_back(best_cached);
    t.queued_bytes.push_back(best_queued);
  };
  for (size_t i = 0; i < s.events.size(); ++i) {
    const Event& e = s.events[i];
    if (!on_device(e, dev)) continue;
    const double ts = double(e.t_ns) * 1e-9;
    switch (e.kind) {
      case EventKind::take:
        live[e.block] = {e.role, e.bytes, 0};
        bytes[size_t(e.role)] += double(e.bytes);
        cached = double(e.cached_bytes);
        queued = double(e.queued_bytes);
        break;
      case EventKind::free: {
        auto it = live.find(e.block);
        if (it != live.end()) {
          bytes[size_t(it->second.role)] -= double(it->second.bytes);
          live.erase(it);
        }
        cached = double(e.cached_bytes);
        queued = double(e.queued_bytes);
        break;
      }
      case EventKind::retag: {
        auto it = live.find(e.block);
        if (it != live.end()) {
          bytes[size_t(it->second.role)] -= double(it->second.bytes);
          it->second.role = e.role;
          bytes[size_t(e.role)] += double(it->second.bytes);
        }
        break;
      }
      case EventKind::site: queued = double(e.queued_bytes); break;
      case EventKind::returned: cached = double(e.cached_bytes); break;
      case EventKind::mark:
        queued = double(e.queued_bytes);
        if (e.site < s.marks.size()) t.marks.emplace_back(ts, s.marks[e.site]);
        continue;
    }
    double total = 0;
    for (double b : bytes) total += b;
    if (total > double(t.peak_bytes)) {
      t.peak_bytes = size_t(total);
      t.peak_t_s = ts;
      peak_event = i;
      for (int r = 0; r < kRoles; ++r) t.peak_by_role[size_t(r)] = size_t(bytes[size_t(r)]);
    }
    const size_t k = t_end > 0 ? std::min(points - 1, size_t(ts / t_end * double(points - 1))) : 0;
    if (k != slice) {
      emit();
      slice = k;
      slice_best = -1;
    }
    if (total > slice_best) {
      slice_best = total;
      best_bytes = bytes;
      best_cached = cached;
      best_queued = queued;
      best_t = ts;
    }
  }
  emit();

  // The sites at the peak: replay up to the peak event, then group what is live. A block's
  // site is its own whenever it came (its op is queued right after its output is taken).
  std::unordered_map<uint64_t, uint32_t> site_of;
  for (const Event& e : s.events)
    if (e.kind == EventKind::site && on_device(e, dev)) site_of[e.block] = e.site;
  live.clear();
  for (size_t i = 0; i <= peak_event && i < s.events.size(); ++i) {
    const Event& e = s.events[i];
    if (!on_device(e, dev)) continue;
    if (e.kind == EventKind::take) {
      auto named = site_of.find(e.block);
      live[e.block] = {e.role, e.bytes, named != site_of.end() ? named->second : e.site};
    } else if (e.kind == EventKind::free) {
      live.erase(e.block);
    } else if (e.kind == EventKind::retag) {
      if (auto it = live.find(e.block); it != live.end()) it->second.role = e.role;
    }
  }
  std::map<std::tuple<uint32_t, int>, SiteBytes> groups;
  for (const auto& [id, st] : live) {
    SiteBytes& g = groups[{st.site, int(st.role)}];
    if (g.blocks == 0) {
      if (st.site < s.sites.size()) {
        g.op = s.sites[st.site].op;
        g.file = s.sites[st.site].file;
        g.line = s.sites[st.site].line;
      } else {
        g.op = "(unknown)";
      }
      g.role = st.role;
    }
    g.bytes += st.bytes;
    ++g.blocks;
  }
  for (auto& [k, g] : groups) t.sites_at_peak.push_back(std::move(g));
  std::sort(t.sites_at_peak.begin(), t.sites_at_peak.end(),
            [](const SiteBytes& a, const SiteBytes& b) { return a.bytes > b.bytes; });
  return t;
}

std::string memory_timeline_svg(const MemoryTimeline& t, const MemoryReportOptions& options) {
  const double w = std::max(400, options.width), left = 80, right = 170, top = 40;
  const double main_h = 300, gap = 50, lane_h = 90, bottom = 45;
  const double pw = w - left - right, h = top + main_h + gap + lane_h + bottom;
  const size_t n = t.t_s.size();
  double t_max = n ? t.t_s.back() : 1;
  if (!(t_max > 0)) t_max = 1;
  double y_max = 1, q_max = 1;
  for (size_t i = 0; i < n; ++i) {
    double total = t.cached_bytes[i];
    for (int r = 0; r < kRoles; ++r) total += t.role_bytes[size_t(r)][i];
    y_max = std::max(y_max, total);
    q_max = std::max(q_max, t.queued_bytes[i]);
  }
  const double ystep = nice_step(y_max / kMB, 5) * kMB, qstep = nice_step(q_max / kMB, 2) * kMB;
  y_max = std::ceil(y_max / ystep) * ystep;
  q_max = std::ceil(q_max / qstep) * qstep;
  auto sx = [&](double ts) { return left + ts / t_max * pw; };
  auto sy = [&](double b) { return top + main_h - b / y_max * main_h; };
  const double lane_top = top + main_h + gap;
  auto sq = [&](double b) { return lane_top + lane_h - b / q_max * lane_h; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"memory-timeline\" width=\"" << w
    << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << ' ' << h
    << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  o << "<rect width=\"" << w << "\" height=\"" << h << "\" fill=\"white\"/>\n";
  o << "<text x=\"" << px(left) << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
    << escape(options.title) << ": bytes by role over time (" << escape(options.device.str())
    << ")</text>\n";
  // Grid and y ticks (MB).
  for (double v = 0; v <= y_max + ystep / 2; v += ystep)
    o << "<line x1=\"" << px(left - 4) << "\" x2=\"" << px(left + pw) << "\" y1=\"" << px(sy(v))
      << "\" y2=\"" << px(sy(v)) << "\" stroke=\"#e5e5e5\"/><text x=\"" << px(left - 7) << "\" y=\""
      << px(sy(v) + 4) << "\" text-anchor=\"end\">" << mb(v) << "</text>\n";
  o << "<text x=\"16\" y=\"" << px(top + main_h / 2) << "\" transform=\"rotate(-90 16 "
    << px(top + main_h / 2) << ")\" text-anchor=\"middle\" font-size=\"12\">MB</text>\n";
  // Stacked areas: each role's band, then the cached bytes on top.
  std::vector<double> base(n, 0.0);
  auto band = [&](const std::vector<double>& values, const char* fill, const std::string& cls) {
    if (n == 0) return;
    o << "<polygon class=\"" << cls << "\" fill=\"" << fill << "\" stroke=\"none\" points=\"";
    for (size_t i = 0; i < n; ++i)
      o << px(sx(t.t_s[i])) << ',' << px(sy(base[i] + values[i])) << ' ';
    for (size_t i = n; i-- > 0;) o << px(sx(t.t_s[i])) << ',' << px(sy(base[i])) << ' ';
    o << "\"/>\n";
    for (size_t i = 0; i < n; ++i) base[i] += values[i];
  };
  for (Role r : kStackOrder)
    band(t.role_bytes[size_t(r)], colour(r), "role role-" + std::to_string(int(r)));
  band(t.cached_bytes, kCachedColour, "cached");
  o << "<rect x=\"" << px(left) << "\" y=\"" << px(top) << "\" width=\"" << px(pw) << "\" height=\""
    << px(main_h) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  // Marks (sync points): thin lines; a label only where it clears the last one drawn.
  double labelled_x = -1e9;
  for (size_t i = 0; i < t.marks.size(); ++i) {
    const double x = sx(t.marks[i].first);
    o << "<line class=\"mark\" x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << px(top)
      << "\" y2=\"" << px(lane_top + lane_h) << "\" stroke=\"#555555\" stroke-opacity=\"0.35\""
      << " stroke-dasharray=\"2,3\"><title>" << escape(t.marks[i].second) << "</title></line>\n";
    if (x - labelled_x < 7.0 * double(t.marks[i].second.size()) + 8) continue;
    labelled_x = x;
    o << "<text x=\"" << px(x + 2) << "\" y=\"" << px(top + 10) << "\" font-size=\"9\" "
      << "fill=\"#555555\">" << escape(t.marks[i].second) << "</text>\n";
  }
  // The peak.
  const double peak_x = sx(t.peak_t_s), peak_y = sy(double(t.peak_bytes));
  o << "<g class=\"peak\"><line x1=\"" << px(peak_x) << "\" x2=\"" << px(peak_x) << "\" y1=\""
    << px(top) << "\" y2=\"" << px(top + main_h) << "\" stroke=\"#000000\" stroke-width=\"1.5\" "
    << "stroke-dasharray=\"5,3\"/><circle cx=\"" << px(peak_x) << "\" cy=\"" << px(peak_y)
    << "\" r=\"4\" fill=\"#000000\"/><text x=\"" << px(peak_x + 6) << "\" y=\""
    << px(std::max(top + 24, peak_y - 6)) << "\" font-weight=\"bold\">peak "
    << mb(double(t.peak_bytes)) << " MB at " << fmt("%.3f", t.peak_t_s) << " s</text></g>\n";
  // The queued lane.
  o << "<text x=\"" << px(left) << "\" y=\"" << px(lane_top - 8) << "\" font-size=\"12\">"
    << "held by queued work (all devices), MB</text>\n";
  if (n) {
    o << "<polygon class=\"queued\" fill=\"" << kQueuedColour
      << "\" fill-opacity=\"0.6\" points=\"";
    for (size_t i = 0; i < n; ++i) o << px(sx(t.t_s[i])) << ',' << px(sq(t.queued_bytes[i])) << ' ';
    o << px(sx(t.t_s[n - 1])) << ',' << px(sq(0)) << ' ' << px(sx(t.t_s[0])) << ',' << px(sq(0))
      << "\"/>\n";
  }
  for (double v = 0; v <= q_max + qstep / 2; v += qstep)
    o << "<text x=\"" << px(left - 7) << "\" y=\"" << px(sq(v) + 4) << "\" text-anchor=\"end\">"
      << mb(v) << "</text>\n";
  o << "<rect x=\"" << px(left) << "\" y=\"" << px(lane_top) << "\" width=\"" << px(pw)
    << "\" height=\"" << px(lane_h) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  // The time axis.
  const double tstep = nice_step(t_max, 8);
  for (double v = 0; v <= t_max + tstep / 100; v += tstep)
    o << "<text x=\"" << px(sx(v)) << "\" y=\"" << px(lane_top + lane_h + 16)
      << "\" text-anchor=\"middle\">" << fmt("%g", v) << "</text>\n";
  o << "<text x=\"" << px(left + pw / 2) << "\" y=\"" << px(h - 8)
    << "\" text-anchor=\"middle\" font-size=\"12\">seconds since recording started</text>\n";
  // Legend, top first as stacked.
  double ly = top + 6;
  auto legend = [&](const char* fill, const std::string& label) {
    o << "<rect x=\"" << px(left + pw + 14) << "\" y=\"" << px(ly)
      << "\" width=\"12\" height=\"12\" "
      << "fill=\"" << fill << "\"/><text x=\"" << px(left + pw + 32) << "\" y=\"" << px(ly + 10)
      << "\">" << escape(label) << "</text>\n";
    ly += 18;
  };
  legend(kCachedColour, "cached (free, kept)");
  for (int k = kRoles; k-- > 0;)
    legend(colour(kStackOrder[k]), std::string(memory::name(kStackOrder[k])));
  legend(kQueuedColour, "held by queued work");
  o << "</svg>\n";
  return o.str();
}

std::string memory_report_html(const memory::Snapshot& s, const MemoryReportOptions& options) {
  const MemoryTimeline t = memory_timeline(s, options);
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
    << escape(options.title) << "</title>\n<style>\n"
    << "body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222}"
    << "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}"
    << ".cmd{font-family:monospace;color:#555}table{border-collapse:collapse;font-size:13px}"
    << "td,th{border-bottom:1px solid #ddd;padding:3px 10px;text-align:left}"
    << "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    << "#readout{font-family:monospace;font-size:12px;min-height:2.6em;white-space:pre}"
    << ".sw{display:inline-block;width:10px;height:10px;margin-right:5px}\n</style></head><body>\n";
  o << "<h1>" << escape(options.title) << "</h1>\n";
  if (!options.command.empty()) o << "<div class=\"cmd\">" << escape(options.command) << "</div>\n";
  o << "<h2>Summary</h2>\n<table id=\"summary\">"
    << "<tr><th>device</th><td>" << escape(options.device.str()) << "</td></tr>"
    << "<tr><th>peak (recorded blocks)</th><td class=\"n\">" << mb(double(t.peak_bytes))
    << " MB at " << fmt("%.3f", t.peak_t_s) << " s</td></tr>";
  for (Role r : kStackOrder)
    o << "<tr><th><span class=\"sw\" style=\"background:" << colour(r) << "\"></span>"
      << memory::name(r) << " at the peak</th><td class=\"n\">"
      << mb(double(t.peak_by_role[size_t(r)])) << " MB</td></tr>";
  const size_t di = options.device.is_cpu() ? 0 : size_t(options.device.index) + 1;
  const size_t untracked = di < s.untracked_bytes.size() ? s.untracked_bytes[di] : 0;
  o << "<tr><th>untracked (taken before recording started, alive at the snapshot)</th>"
    << "<td class=\"n\">" << mb(double(untracked)) << " MB</td></tr>"
    << "<tr><th>events</th><td class=\"n\">" << t.events
    << (s.dropped_events ? " (" + std::to_string(s.dropped_events) + " more not kept)" : "")
    << "</td></tr></table>\n";
  o << "<h2>Timeline</h2>\n<div id=\"plot\">" << memory_timeline_svg(t, options) << "</div>\n"
    << "<div id=\"readout\">move the pointer over the timeline</div>\n";
  o << "<h2>Allocation sites at the peak</h2>\n<table id=\"sites\"><tr><th>site</th><th>role</th>"
    << "<th>blocks</th><th>MB</th></tr>\n";
  for (size_t i = 0; i < std::min(options.top_sites, t.sites_at_peak.size()); ++i) {
    const SiteBytes& g = t.sites_at_peak[i];
    o << "<tr><td>" << escape(site_label(g.op, g.file, g.line)) << "</td><td>"
      << memory::name(g.role) << "</td><td class=\"n\">" << g.blocks << "</td><td class=\"n\">"
      << mb(double(g.bytes)) << "</td></tr>\n";
  }
  o << "</table>\n<h2>Alive at the snapshot</h2>\n<table id=\"alive\"><tr><th>role</th>"
    << "<th>blocks</th><th>MB</th><th>of which held by queued work, MB</th></tr>\n";
  std::array<size_t, kRoles> nb{}, by{}, bq{};
  for (const memory::Block& b : s.blocks) {
    if (b.device != options.device) continue;
    ++nb[size_t(b.role)];
    by[size_t(b.role)] += b.bytes;
    if (b.queued) bq[size_t(b.role)] += b.bytes;
  }
  for (Role r : kStackOrder)
    o << "<tr><td>" << memory::name(r) << "</td><td class=\"n\">" << nb[size_t(r)]
      << "</td><td class=\"n\">" << mb(double(by[size_t(r)])) << "</td><td class=\"n\">"
      << mb(double(bq[size_t(r)])) << "</td></tr>\n";
  o << "</table>\n";
  // The readout: the nearest point's bytes by role. Data inline; no network.
  o << "<script>\n\"use strict\";\nconst T=[";
  for (size_t i = 0; i < t.t_s.size(); ++i) o << (i ? "," : "") << fmt("%.6f", t.t_s[i]);
  o << "];\nconst R={";
  for (int k = 0; k < kRoles; ++k) {
    const Role r = kStackOrder[k];
    o << (k ? "," : "") << '"' << memory::name(r) << "\":[";
    const auto& v = t.role_bytes[size_t(r)];
    for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << fmt("%.0f", v[i]);
    o << "]";
  }
  o << ",\"cached\":[";
  for (size_t i = 0; i < t.cached_bytes.size(); ++i)
    o << (i ? "," : "") << fmt("%.0f", t.cached_bytes[i]);
  o << "],\"queued\":[";
  for (size_t i = 0; i < t.queued_bytes.size(); ++i)
    o << (i ? "," : "") << fmt("%.0f", t.queued_bytes[i]);
  o << "]};\n"
    << "const svg=document.querySelector('#plot svg');\n"
    << "const out=document.getElementById('readout');\n"
    << "const vb=svg.viewBox.baseVal;const left=80,right=170;\n"
    << "svg.addEventListener('mousemove',ev=>{const b=svg.getBoundingClientRect();\n"
    << " const x=(ev.clientX-b.left)*vb.width/b.width;\n"
    << " const tm=(x-left)/(vb.width-left-right)*T[T.length-1];\n"
    << " let lo=0,hi=T.length-1;while(lo<hi){const m=(lo+hi)>>1;if(T[m]<tm)lo=m+1;else hi=m;}\n"
    << " const parts=Object.keys(R).map(k=>k+' '+(R[k][lo]/1048576).toFixed(2)+' MB');\n"
    << " out.textContent='t = '+T[lo].toFixed(4)+' s\\n'+parts.join('  ');});\n"
    << "document.body.dataset.rendered='ok';\n</script>\n</body></html>\n";
  return o.str();
}

void write_memory_report(const std::string& path, const memory::Snapshot& s,
                         const MemoryReportOptions& options) {
  using F = MemoryReportOptions::Format;
  const bool svg =
      options.format == F::svg || (options.format == F::by_extension && path.size() >= 4 &&
                                   path.compare(path.size() - 4, 4, ".svg") == 0);
  write_text_file(path,
                  svg ? memory_timeline_svg(memory_timeline(s, options), options)
                      : memory_report_html(s, options),
                  "memory_report");
}

}  // namespace tide::train
