#include "core/cuda/cuda_stream.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "core/cuda/runtime.h"
#include "core/engine/engine_impl.h"
#include "core/engine/failure.h"
#include "core/error.h"

namespace tide::cuda {

CudaStream::CudaStream(StreamImpl& owner, DeviceRuntime& rt)
    : DeviceStream(owner), rt_(rt), api_(rt.api()) {
  stream_ = api_.create_stream();
  timeline_ = static_cast<uint64_t*>(api_.host_alloc(sizeof(uint64_t)));
  TIDE_CHECK(timeline_, "stream", "no pinned host memory for the timeline of a stream on ",
             owner.device.str());
  *timeline_ = 0;
  for (Mark& m : marks_) m.event = api_.create_event();
  ctx_.device = owner.device;
  ctx_.stream_id = owner.id;
  ctx_.stream = stream_;
  ctx_.api = &api_;
  ctx_.blas = api_.create_blas();
  if (ctx_.blas) {
    ctx_.workspace = api_.malloc(kWorkspaceBytes);
    ctx_.workspace_bytes = ctx_.workspace ? kWorkspaceBytes : 0;
  }
  owner.polled = true;
  rt_.add_stream(this);
}

CudaStream::~CudaStream() { rt_.remove_stream(this); }

void CudaStream::throw_failed(const char* what) const {
  Failure* f = rt_.failure();
  throw std::runtime_error(std::string(what) + (f ? f->what() : std::string("device failed")));
}

void CudaStream::check_usable(const char* op) const { rt_.check_usable(op); }

void CudaStream::fail_if_sticky(const Status& st, const char* op) {
  if (st.kind != Status::sticky) return;
  // An earlier op's asynchronous fault, reported to this op: fail the device and give this
  // op the device's message, which names the first op that may have caused it.
  rt_.fail(st, op);
  throw_failed("");
}

void CudaStream::check(const Status& st, const char* op) {
  fail_if_sticky(st, op);
  if (st.failed()) throw std::runtime_error(st.message);  // this op's own error
}

// ---- the worker ------------------------------------------------------------------------

void CudaStream::run(Engine::Task& t) {
  if (rt_.failure()) throw_failed("not launched: the device failed earlier: ");
  Launch& l = launches_[t.seq % kLaunches];
  l.seq.store(0, std::memory_order_relaxed);
  l.order = rt_.next_launch();
  l.op = t.op;
  l.site = t.site;
  l.seq.store(t.seq, std::memory_order_release);
  api_.make_current();
  EventHandle span = profiler::enabled() ? begin_span() : nullptr;
  try {
    t.invoke(t, ctx_);
  } catch (...) {
    // The entry threw (a CUDA call it checked failed): clear that call's error so the next
    // op is not blamed for it; a sticky one fails the device and replaces the message.
    if (span) end_span(t.op, span);
    fail_if_sticky(api_.last_error(), t.op);
    throw;
  }
  if (span) end_span(t.op, span);
  check(api_.last_error(), t.op);
}

void CudaStream::run_inline(Engine::Task& t) {
  if (rt_.failure()) throw_failed("not launched: the device failed earlier: ");
  KernelContext c = ctx_;
  c.stream_id = -1;
  api_.make_current();
  try {
    t.invoke(t, c);
  } catch (...) {  // as in run(): leave no error behind for the next op
    fail_if_sticky(api_.last_error(), t.op);
    throw;
  }
  check(api_.last_error(), t.op);
  check(api_.synchronize(stream_), t.op);  // TIDE_ENGINE=sync: the op's own error
}

void CudaStream::write_timeline(uint64_t seq) {
  api_.write_timeline(stream_, timeline_, seq);
  written_ = seq;
}

void CudaStream::flush_timeline() {
  uint64_t issued = owner_.issued.load(std::memory_order_relaxed);
  if (written_ < issued && !rt_.failure()) write_timeline(issued);
}

void CudaStream::record_wanted(uint64_t at) {
  uint64_t w = want_upto_.load(std::memory_order_seq_cst);
  if (w <= recorded_upto_ || w > at || rt_.failure()) return;
  uint64_t k = num_marks_.load(std::memory_order_relaxed);
  Mark& m = marks_[k % kMarks];
  // Re-recording a mark only moves it later on this stream: a consumer that picked it up
  // for an earlier position at worst waits a little longer.
  api_.record(m.event, stream_);
  m.seq.store(at, std::memory_order_release);
  num_marks_.store(k + 1, std::memory_order_release);
  recorded_upto_ = at;
}

void CudaStream::retire(uint64_t seq) {
  owner_.issued.store(seq, std::memory_order_release);
  if (rt_.failure()) {  // nothing completes on a failed device: the worker says so itself
    owner_.advance_completed(seq);
    return;
  }
  if (seq == owner_.published.load(std::memory_order_acquire) || seq - written_ >= kTimelineEvery)
    write_timeline(seq);
  record_wanted(seq);
}

void CudaStream::idle() {
  flush_timeline();
  record_wanted(owner_.issued.load(std::memory_order_relaxed));
}

void CudaStream::will_be_waited(uint64_t seq, StreamImpl& waiter) {
  if (waiter.device != owner_.device) return;  // a host wait: nothing to record
  uint64_t w = want_upto_.load(std::memory_order_relaxed);
  while (w < seq && !want_upto_.compare_exchange_weak(w, seq, std::memory_order_seq_cst)) {
  }
  owner_.nudge();
}

EventHandle CudaStream::event_covering(uint64_t seq) const {
  uint64_t n = num_marks_.load(std::memory_order_acquire);
  EventHandle best = nullptr;
  uint64_t best_seq = UINT64_MAX;
  for (uint64_t k = n > kMarks ? n - kMarks : 0; k < n; ++k) {
    const Mark& m = marks_[k % kMarks];
    uint64_t s = m.seq.load(std::memory_order_acquire);
    if (s >= seq && s < best_seq) {
      best = m.event;
      best_seq = s;
    }
  }
  return best;
}

void CudaStream::wait_for(StreamPos pos) {
  flush_timeline();  // a task waited for elsewhere must not wait for the next write
  StreamImpl& producer = *pos.stream;
  if (producer.device != owner_.device) {  // the CPU or another GPU: wait on the host
    owner_.eng->wait_pos(pos);
    return;
  }
  auto& p = static_cast<CudaStream&>(*producer.dev);
  for (int i = 0;; ++i) {
    if (producer.is_complete(pos.seq) || rt_.failure()) return;
    if (EventHandle e = p.event_covering(pos.seq)) {
      api_.wait(stream_, e);
      return;
    }
    // The producer records the event right after launching the task or when idle.
    if (i < 64) detail::cpu_relax();
    else std::this_thread::yield();
  }
}

// ---- completion ------------------------------------------------------------------------

uint64_t CudaStream::poll() {
  uint64_t v = __atomic_load_n(timeline_, __ATOMIC_ACQUIRE);
  owner_.advance_completed(v);
  return owner_.completed.load(std::memory_order_acquire);
}

namespace {
// Linux lets a sleep overrun by the thread's timer slack (50 us by default): over a GPU
// wait of a few ms that slack, not the poll interval, decides how late the waiter sees the
// timeline move. Tightened for the wait only, and restored.
class TightTimerSlack {
 public:
  TightTimerSlack() {
#if defined(__linux__)
    int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (old > 0 && prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0) == 0) old_ = old;
#endif
  }
  ~TightTimerSlack() {
#if defined(__linux__)
    if (old_ > 0) (void)prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(old_), 0, 0, 0);
#endif
  }
  TightTimerSlack(const TightTimerSlack&) = delete;
  TightTimerSlack& operator=(const TightTimerSlack&) = delete;

 private:
  int old_ = 0;
};
}  // namespace

void CudaStream::block_until(uint64_t seq) {
  // Nothing wakes a host thread when the GPU writes the timeline: poll it, sleeping a
  // little longer each time (up to 20 us: a late wake-up costs a wait up to that much),
  // and ask the device for an asynchronous error now and then, since a faulted stream
  // never reaches seq.
  TightTimerSlack slack;
  int64_t sleep_ns = 5'000;
  for (int i = 1;; ++i) {
    if (owner_.is_complete(seq)) return;
    if ((i & 15) == 0 && !rt_.failure()) {
      Status st = api_.query(stream_);
      if (st.kind == Status::sticky) rt_.fail(st, "a wait for the device");
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
    sleep_ns = std::min<int64_t>(sleep_ns * 2, 20'000);
  }
}

bool CudaStream::launched_op(uint64_t seq, const char** op, tide::SourceLocation* site,
                             uint64_t* order) const {
  const Launch& l = launches_[seq % kLaunches];
  if (l.seq.load(std::memory_order_acquire) != seq) return false;
  *op = l.op;
  *site = l.site;
  *order = l.order;
  return l.seq.load(std::memory_order_acquire) == seq;
}

// ---- profiling ---------------------------------------------------------------------------

EventHandle CudaStream::timed_event() {
  if (timed_used_ == timed_pool_.size()) timed_pool_.push_back(api_.create_timed_event());
  return timed_pool_[timed_used_++];
}

EventHandle CudaStream::begin_span() {
  std::lock_guard lock(prof_mu_);
  uint64_t session = profiler::detail::session();
  if (session != prof_session_) {
    // A new session: profiler::start() waited for all work, so this stream is idle and the
    // base event is reached at once; its host time anchors the GPU's clock.
    prof_session_ = session;
    spans_.clear();
    timed_used_ = 0;
    prof_base_ = timed_event();
    api_.record(prof_base_, stream_);
    prof_base_ns_ = profiler::detail::now_ns();
  }
  EventHandle e = timed_event();
  api_.record(e, stream_);
  return e;
}

void CudaStream::end_span(const char* op, EventHandle start) {
  std::lock_guard lock(prof_mu_);
  EventHandle e = timed_event();
  api_.record(e, stream_);
  spans_.push_back({op, start, e});
}

void CudaStream::collect_spans(std::vector<profiler::GpuSpan>& out) {
  std::lock_guard lock(prof_mu_);
  if (prof_session_ != profiler::detail::session()) return;  // from an earlier session
  for (const TimedSpan& s : spans_) {
    float a = api_.elapsed_ms(prof_base_, s.start), b = api_.elapsed_ms(prof_base_, s.end);
    if (a < 0 || b < 0) continue;  // not complete
    out.push_back({s.op, owner_.id, prof_base_ns_ + int64_t(double(a) * 1e6),
                   prof_base_ns_ + int64_t(double(b) * 1e6)});
  }
}

void CudaStream::abandon() {
  owner_.advance_completed(owner_.issued.load(std::memory_order_acquire));
}

}  // namespace tide::cuda
