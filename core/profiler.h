// The profiler: per op, when it was queued (frontend), when it started and ended (worker)
// and on which stream; counter tracks sampled at every submit (queue depth, bytes held by
// queued work, allocator active bytes). Writes Chrome trace-event JSON that opens in
// Perfetto or chrome://tracing. Off by default; when off it costs one relaxed load per op.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tide::profiler {

struct OpRecord {
  const char* op;
  int stream;          // stream id; -1 for ops run synchronously in the calling thread
  int64_t enqueue_ns;  // times since start(), steady clock
  int64_t start_ns;
  int64_t end_ns;
};
// A task's time on a GPU (between a timed event recorded before its launches and one
// after), on the profiler's clock: start_ns is when the GPU reached the task.
struct GpuSpan {
  const char* op;
  int stream;
  int64_t start_ns;
  int64_t end_ns;
};
struct CounterSample {
  int64_t t_ns;
  uint64_t queue_depth;
  uint64_t inflight_bytes;
  uint64_t active_bytes;
};

// Clears earlier records and starts recording. Does not wait.
void start();
// Stops recording. Does not wait; records of ops still queued are completed when they run.
void stop();
namespace detail {
// Whether start() is in effect: read on every submit, so inline and lock-free.
inline std::atomic<bool> g_enabled{false};
}  // namespace detail
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
// Waits for all queued work (without rethrowing failures), then returns the op records
// sorted by enqueue time.
std::vector<OpRecord> ops();
std::vector<CounterSample> counters();
// Waits like ops(), then returns the GPU-side spans of the tasks run on GPU streams since
// start(), sorted by start. Their clock is the GPU's, placed on the host's by an event the
// stream recorded when it was idle at its first profiled task (accurate to a few us).
std::vector<GpuSpan> gpu_spans();
// Waits like ops(), then writes the Chrome trace. Throws tide::Error("[profiler]") when
// the file cannot be written.
void write_chrome_trace(const std::string& path);

// RAII: start() now, stop() and write_chrome_trace(path) at scope exit (errors reported
// on stderr, since a destructor must not throw). An empty path records nothing.
class Session {
 public:
  explicit Session(std::string path);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  std::string path_;
};

namespace detail {
int64_t now_ns();
// Appends to the buffer of `stream` (its worker, or the pool threads of a replay on it;
// each buffer has its own lock) or, for stream -1, to the synchronous-mode buffer.
void record_op(const OpRecord& r);
// The stream of the task the calling worker runs (for spans nested in a task: the nodes
// of a traced replay); -1 outside a task or in synchronous mode.
inline thread_local int tl_running_stream = -1;
void record_counters(const CounterSample& s);  // caller holds the engine lock
// Caller holds the engine lock. `label` names the stream's track ("cpu", "cuda:0").
void register_stream(int id, const std::string& label);
// Which profiling session is on (changes with every start()): GPU streams re-anchor their
// clock when it changes.
uint64_t session();
// Where gpu_spans() gets its spans: set by the CUDA runtime when it starts.
using GpuSpanSource = void (*)(std::vector<GpuSpan>& out);
void set_gpu_span_source(GpuSpanSource f);
}  // namespace detail

}  // namespace tide::profiler
