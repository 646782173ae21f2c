// The GPU side of a tide stream (DeviceStream, docs/architecture.md, CUDA). Its worker is a
// launcher: it runs each task's payload, which launches kernels on this stream's cudaStream_t,
// checks the launch with last_error(), and moves on. A task is complete when the GPU has written
// its number to the stream's timeline (pinned host memory the host reads without a driver
// call); the worker writes the timeline after bursts of tasks, every kTimelineEvery tasks,
// and before it waits or sleeps, so every task is eventually covered.
//
// Cross-stream hazards on one GPU become one event record on the producer stream and one
// wait on the consumer stream, and only where a hazard exists: the frontend asks the
// producer (will_be_waited) for an event at the position, the producer's worker records it
// right after launching that task (or as soon as it is idle), and the consumer's worker
// waits on it. A position already complete costs nothing. Hazards with the CPU or another
// GPU are host waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/cuda/device_api.h"
#include "core/engine/device_stream.h"
#include "core/profiler.h"
#include "core/source_location.h"

namespace tide::cuda {

class DeviceRuntime;

class CudaStream final : public DeviceStream {
 public:
  static constexpr uint64_t kTimelineEvery = 16;
  // Each stream's scratch for cuBLASLt and CUB (cuBLASLt's advice for Hopper); a CUDA
  // graph gets one of its own (trace/cuda/device_graph.h).
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  CudaStream(StreamImpl& owner, DeviceRuntime& rt);
  ~CudaStream() override;

  void check_usable(const char* op) const override;
  void wait_for(StreamPos pos) override;
  void run(Engine::Task& t) override;
  void run_inline(Engine::Task& t) override;
  void retire(uint64_t seq) override;
  void will_be_waited(uint64_t seq, StreamImpl& waiter) override;
  void block_until(uint64_t seq) override;
  uint64_t poll() override;
  void idle() override;

  StreamHandle handle() const { return stream_; }
  StreamImpl& owner() const { return owner_; }
  // The op, site and device-wide launch order of launched task seq, if it is still in the
  // recent-launch ring.
  bool launched_op(uint64_t seq, const char** op, tide::SourceLocation* site,
                   uint64_t* order) const;
  // Marks every launched task complete (the device failed: nothing will complete).
  void abandon();
  // Appends the GPU-side spans of the tasks profiled in this profiling session whose
  // events are complete (the profiler's gpu_spans()).
  void collect_spans(std::vector<profiler::GpuSpan>& out);

 private:
  // The event of a record covering `seq` (recorded after task seq or later), or nullptr.
  EventHandle event_covering(uint64_t seq) const;
  void write_timeline(uint64_t seq);
  void flush_timeline();
  void record_wanted(uint64_t at);
  [[noreturn]] void throw_failed(const char* what) const;
  // For a status found while running op (a launch check, a sync): a sticky error fails
  // the device and throws its failure; check() also throws any other error as op's own.
  void fail_if_sticky(const Status& st, const char* op);
  void check(const Status& st, const char* op);

  DeviceRuntime& rt_;
  DeviceApi& api_;
  StreamHandle stream_ = nullptr;
  uint64_t* timeline_ = nullptr;  // pinned host memory the GPU writes
  uint64_t written_ = 0;          // worker: last value written to the timeline

  // Event marks: the producer side of cross-stream waits.
  static constexpr int kMarks = 64;
  struct Mark {
    std::atomic<uint64_t> seq{0};  // the record covers tasks up to seq (0: unused)
    EventHandle event = nullptr;
  };
  Mark marks_[kMarks];
  std::atomic<uint64_t> num_marks_{0};
  std::atomic<uint64_t> want_upto_{0};  // frontends: record an event covering this
  uint64_t recorded_upto_ = 0;          // worker

  // Recent launches, for naming the first op a device failure may come from.
  static constexpr int kLaunches = 256;
  struct Launch {
    std::atomic<uint64_t> seq{0};
    uint64_t order = 0;  // device-wide launch order
    const char* op = nullptr;
    tide::SourceLocation site;
  };
  Launch launches_[kLaunches];

  // Profiling: a timed event before and after each task's launches, placed on the host's
  // clock by a base event recorded when the session's first task was launched.
  EventHandle begin_span();
  void end_span(const char* op, EventHandle start);
  EventHandle timed_event();  // under prof_mu_
  struct TimedSpan {
    const char* op;
    EventHandle start, end;
  };
  std::mutex prof_mu_;
  uint64_t prof_session_ = 0;
  EventHandle prof_base_ = nullptr;
  int64_t prof_base_ns_ = 0;
  std::vector<TimedSpan> spans_;
  std::vector<EventHandle> timed_pool_;
  size_t timed_used_ = 0;
};

}  // namespace tide::cuda
