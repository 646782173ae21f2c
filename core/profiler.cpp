#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "core/engine/engine.h"
#include "core/error.h"

namespace tide::profiler {

namespace {
// One stream's records. Its lock is needed although a stream has one worker: a traced
// replay with several pool threads records its nodes on the replay's stream from each of
// them, and start() clears the buffer while workers may still append.
struct StreamBuffer {
  std::mutex mu;
  std::vector<OpRecord> ops;
};
// Stream ids are dense and bounded by the engine (64); the table is fixed so that a
// worker never reads a container that register_stream is growing.
constexpr int kMaxProfiledStreams = 256;
struct Buffers {
  std::atomic<int64_t> t0{0};
  std::mutex mu;  // guards `inline_ops`, `counters`, `labels`
  std::atomic<StreamBuffer*> streams[kMaxProfiledStreams] = {};  // set once, never freed
  std::vector<OpRecord> inline_ops;  // synchronous-mode ops and unknown streams
  std::vector<CounterSample> counters;
  std::vector<std::string> labels;  // per stream id
  std::atomic<uint64_t> session{0};
  std::atomic<detail::GpuSpanSource> gpu_source{nullptr};
};
Buffers& buf() {
  static Buffers* b = new Buffers;  // never destroyed: workers may record during exit
  return *b;
}
int64_t raw_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

namespace detail {
int64_t now_ns() { return raw_now() - buf().t0.load(std::memory_order_relaxed); }
void record_op(const OpRecord& r) {
  Buffers& b = buf();
  StreamBuffer* sb = r.stream >= 0 && r.stream < kMaxProfiledStreams
                         ? b.streams[r.stream].load(std::memory_order_acquire)
                         : nullptr;
  if (sb) {
    std::lock_guard lock(sb->mu);
    sb->ops.push_back(r);
  } else {
    std::lock_guard lock(b.mu);
    b.inline_ops.push_back(r);
  }
}
void record_counters(const CounterSample& s) {
  Buffers& b = buf();
  std::lock_guard lock(b.mu);
  b.counters.push_back(s);
}
void register_stream(int id, const std::string& label) {
  Buffers& b = buf();
  std::lock_guard lock(b.mu);
  if (id >= 0 && id < kMaxProfiledStreams && !b.streams[id].load(std::memory_order_relaxed))
    b.streams[id].store(new StreamBuffer, std::memory_order_release);
  if (int(b.labels.size()) <= id) b.labels.resize(size_t(id) + 1);
  b.labels[size_t(id)] = label;
}
uint64_t session() { return buf().session.load(std::memory_order_acquire); }
void set_gpu_span_source(GpuSpanSource f) { buf().gpu_source.store(f); }
}  // namespace detail

void start() {
  Buffers& b = buf();
  Engine::get().synchronize();
  std::lock_guard lock(b.mu);
  for (auto& slot : b.streams)
    if (StreamBuffer* sb = slot.load(std::memory_order_acquire)) {
      std::lock_guard stream_lock(sb->mu);
      sb->ops.clear();
    }
  b.inline_ops.clear();
  b.counters.clear();
  b.t0.store(raw_now());
  b.session.fetch_add(1, std::memory_order_acq_rel);
  detail::g_enabled.store(true);
}

void stop() { detail::g_enabled.store(false); }

std::vector<OpRecord> ops() {
  Engine::get().synchronize();
  Buffers& b = buf();
  std::lock_guard lock(b.mu);
  std::vector<OpRecord> all = b.inline_ops;
  for (auto& slot : b.streams)
    if (StreamBuffer* sb = slot.load(std::memory_order_acquire)) {
      std::lock_guard stream_lock(sb->mu);
      all.insert(all.end(), sb->ops.begin(), sb->ops.end());
    }
  std::sort(all.begin(), all.end(),
            [](const OpRecord& x, const OpRecord& y) { return x.enqueue_ns < y.enqueue_ns; });
  return all;
}

std::vector<CounterSample> counters() {
  Engine::get().synchronize();
  Buffers& b = buf();
  std::lock_guard lock(b.mu);
  return b.counters;
}

std::vector<GpuSpan> gpu_spans() {
  Engine::get().synchronize();
  std::vector<GpuSpan> out;
  if (detail::GpuSpanSource f = buf().gpu_source.load()) f(out);
  std::sort(out.begin(), out.end(),
            [](const GpuSpan& x, const GpuSpan& y) { return x.start_ns < y.start_ns; });
  return out;
}

void write_chrome_trace(const std::string& path) {
  std::vector<OpRecord> all = ops();
  std::vector<CounterSample> cs = counters();
  std::vector<GpuSpan> gpu = gpu_spans();
  std::vector<std::string> labels;
  {
    std::lock_guard lock(buf().mu);
    labels = buf().labels;
  }
  auto label = [&](int s) {
    return size_t(s) < labels.size() ? labels[size_t(s)] : std::string("?");
  };
  std::ofstream f(path);
  TIDE_CHECK(f.good(), "profiler", "cannot open '", path, "' for writing");
  // Chrome trace-event format, times in microseconds. pid 1 = the process; tid 0 is the
  // frontend (enqueue instants), tid 1+k is stream k's worker (on a GPU: its launches),
  // tid 2001+k stream k's work on the GPU, tid 999 the synchronous-mode ops.
  auto us = [](int64_t ns) { return double(ns) / 1000.0; };
  char line[512];
  f << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  f << R"J({"name":"process_name","ph":"M","pid":1,"args":{"name":"tide"}})J";
  f << ",\n"
    << R"J({"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"frontend (enqueue)"}})J";
  int max_stream = -1, max_gpu_stream = -1;
  for (const OpRecord& r : all) max_stream = std::max(max_stream, r.stream);
  for (const GpuSpan& g : gpu) max_gpu_stream = std::max(max_gpu_stream, g.stream);
  for (int s = 0; s <= max_stream; ++s) {
    std::string l = label(s);
    std::snprintf(line, sizeof line,
                  ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                  "\"args\":{\"name\":\"stream %d (%s %s)\"}}",
                  s + 1, s, l.c_str(), l == "cpu" ? "worker" : "launcher");
    f << line;
  }
  for (int s = 0; s <= max_gpu_stream; ++s) {
    std::snprintf(line, sizeof line,
                  ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                  "\"args\":{\"name\":\"stream %d (%s, on the GPU)\"}}",
                  2001 + s, s, label(s).c_str());
    f << line;
  }
  for (const GpuSpan& g : gpu) {
    std::snprintf(line, sizeof line,
                  ",\n{\"name\":\"%s\",\"cat\":\"gpu\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f}",
                  g.op, 2001 + g.stream, us(g.start_ns), us(g.end_ns - g.start_ns));
    f << line;
  }
  for (const OpRecord& r : all) {
    int tid = r.stream < 0 ? 999 : r.stream + 1;
    std::snprintf(line, sizeof line,
                  ",\n{\"name\":\"%s\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"queued_us\":%.3f,\"wait_us\":%.3f}}",
                  r.op, tid, us(r.start_ns), us(r.end_ns - r.start_ns), us(r.enqueue_ns),
                  us(r.start_ns - r.enqueue_ns));
    f << line;
    std::snprintf(line, sizeof line,
                  ",\n{\"name\":\"enqueue %s\",\"cat\":\"enqueue\",\"ph\":\"i\",\"s\":\"t\","
                  "\"pid\":1,\"tid\":0,\"ts\":%.3f}",
                  r.op, us(r.enqueue_ns));
    f << line;
  }
  for (const CounterSample& c : cs) {
    std::snprintf(line, sizeof line,
                  ",\n{\"name\":\"queue depth\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,"
                  "\"args\":{\"ops\":%llu}}"
                  ",\n{\"name\":\"memory\",\"ph\":\"C\",\"pid\":1,\"ts\":%.3f,"
                  "\"args\":{\"queued_work_MB\":%.3f,\"allocator_active_MB\":%.3f}}",
                  us(c.t_ns), (unsigned long long)c.queue_depth, us(c.t_ns),
                  double(c.inflight_bytes) / 1e6, double(c.active_bytes) / 1e6);
    f << line;
  }
  f << "\n]}\n";
  f.close();
  TIDE_CHECK(!f.fail(), "profiler", "error while writing '", path, "'");
}

Session::Session(std::string path) : path_(std::move(path)) {
  if (!path_.empty()) start();
}
Session::~Session() {
  if (path_.empty()) return;
  stop();
  try {
    write_chrome_trace(path_);
    std::fprintf(stderr, "trace written to %s\n", path_.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

}  // namespace tide::profiler
