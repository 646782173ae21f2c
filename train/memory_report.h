// The memory report: a recording of core/memory_record.h drawn as a timeline of bytes by
// role (stacked), the cached bytes above them, the bytes held by queued work in a lane of
// its own, the peak and the allocation sites that held memory at the peak. Written as one
// self-contained HTML page (no network, no external script or style) or as the timeline
// alone in SVG, for papers. Nothing here waits or queues work.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory_record.h"

namespace tide::train {

struct MemoryReportOptions {
  std::string title = "tide memory report";
  std::string command;  // shown under the title (the command line that made the recording)
  Device device = Device::cpu();
  int width = 1100;          // of the timeline, in pixels
  size_t max_points = 1500;  // timeline points (each the highest total of its time slice)
  size_t top_sites = 15;     // rows of the table of sites at the peak
  // What write_memory_report writes: by the path's extension (.svg: the timeline alone,
  // anything else: the HTML page), or as given.
  enum class Format { by_extension, html, svg } format = Format::by_extension;
};

// Bytes by site and role at the peak.
struct SiteBytes {
  std::string op, file;
  uint32_t line = 0;
  memory::Role role = memory::Role::temporary;
  size_t bytes = 0;
  size_t blocks = 0;
};

// The recording of one device as a timeline (bytes after each kept event).
struct MemoryTimeline {
  std::vector<double> t_s;
  std::array<std::vector<double>, memory::kNumRoles> role_bytes;  // by memory::Role
  std::vector<double> cached_bytes, queued_bytes;
  size_t peak_bytes = 0;  // the highest sum over roles (cached excluded)
  double peak_t_s = 0;
  std::array<size_t, memory::kNumRoles> peak_by_role{};
  std::vector<SiteBytes> sites_at_peak;  // largest first
  std::vector<std::pair<double, std::string>> marks;
  size_t events = 0;  // the device's events used
};

// Replays the snapshot's events for options.device. Throws tide::Error("[memory_report]")
// when the snapshot has no event for that device.
MemoryTimeline memory_timeline(const memory::Snapshot& s, const MemoryReportOptions& options = {});

// The timeline as an SVG document (stacked roles and cached, the queued lane, the peak and
// the marks).
std::string memory_timeline_svg(const MemoryTimeline& t, const MemoryReportOptions& options = {});

// The whole report as one HTML page: summary, the timeline (with a pointer readout), the
// sites at the peak and the blocks alive when the snapshot was taken, by role.
std::string memory_report_html(const memory::Snapshot& s, const MemoryReportOptions& options = {});

// Writes memory_report_html or memory_timeline_svg (options.format) to `path`.
// Throws tide::Error("[memory_report] cannot write <path>") on I/O errors.
void write_memory_report(const std::string& path, const memory::Snapshot& s,
                         const MemoryReportOptions& options = {});

}  // namespace tide::train
