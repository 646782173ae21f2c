#include "core/engine.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/engine_impl.h"
#include "core/error.h"
#include "core/futex.h"
#include "core/failure.h"
#include "core/profiler.h"
#include "core/spinlock.h"

namespace tide {

namespace {
constexpr int kMaxStreams = 64;
constexpr int64_t kSpinNs = 50'000;  // spin this long before sleeping (a futex wake ~2.5 µs,
                                     // an idle-core wake via condvar ~55 µs on these machines)

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int64_t kYieldNs = 1'000'000;  // then yield the core this long before sleeping

// Spins up to kSpinNs while pred() is false, then keeps polling with sched_yield up to
// kYieldNs: a yielding thread gives its core to any other runnable thread (OpenBLAS's, the
// pool's) but still sees pred() flip within microseconds, where a futex sleep costs a wake
// of ~50 us on these VMs (a replay-and-read loop would pay two per call). Returns pred().
template <class Pred>
bool spin_until(Pred pred) {
  if (pred()) return true;
  int64_t deadline = 0, yield_until = 0;
  for (int i = 1;; ++i) {
    if (yield_until) std::this_thread::yield();
    else cpu_relax();
    if (pred()) return true;
    if ((i & 63) == 0 || yield_until) {
      int64_t now = steady_ns();
      if (!deadline) {
        deadline = now + kSpinNs;
      } else if (now > deadline) {
        if (!yield_until) yield_until = now + kYieldNs;
        else if (now > yield_until) return false;
      }
    }
  }
}

thread_local StreamImpl* tl_current_stream = nullptr;
thread_local int tl_synchronous = -1;  // -1: follow the engine setting
}  // namespace

struct Engine::State {
  SpinLock mu;  // frontend lock: submit, reclaim, hazard state. Never taken by workers.
  std::deque<StreamImpl> streams;
  std::vector<Segment*> free_segments;
  std::atomic<int> waiters{0};  // threads blocked on some stream's `completed`
  std::atomic<uint64_t> max_ops{0}, max_bytes{0};
  std::atomic<bool> synchronous{false};
  bool shutting_down = false;  // under mu
  std::atomic<uint64_t> inflight_bytes{0};
  // Executed tasks are reclaimed in batches: reading the workers' counters on every submit
  // would cost a cache miss per op. Big storages make a batch due at once.
  static constexpr int kReclaimEvery = 32;
  static constexpr size_t kReclaimBytes = size_t(1) << 20;
  int submits_since_reclaim = 0;
  size_t bytes_since_reclaim = 0;
  std::atomic<uint64_t> bp_stalls{0}, bp_stall_ns{0}, failures{0};

  std::mutex failures_mu;
  std::vector<Failure*> pending_failures;  // each holds a reference

  StreamImpl& add_stream(Device d) {
    TIDE_CHECK(int(streams.size()) < kMaxStreams, "stream", "at most ", kMaxStreams,
               " streams; streams live as long as the engine, so create them once");
    StreamImpl& s = streams.emplace_back(this, int(streams.size()), d);
    s.tail_seg = s.reclaim_seg = s.head_seg = new Segment;
    profiler::detail::register_stream(s.id);
    return s;
  }
  Segment* new_segment(uint64_t base) {
    Segment* g;
    if (!free_segments.empty()) {
      g = free_segments.back();
      free_segments.pop_back();
      g->next.store(nullptr, std::memory_order_relaxed);
    } else {
      g = new Segment;
    }
    g->base = base;
    return g;
  }

  // Wakes s's worker if it sleeps; only the caller that clears `sleeping` pays the syscall.
  static void wake_worker(StreamImpl& s) {
    if (s.sleeping.load(std::memory_order_seq_cst) &&
        s.sleeping.exchange(false, std::memory_order_seq_cst)) {
      s.wake_epoch.fetch_add(1, std::memory_order_seq_cst);
      detail::futex_wake(&s.wake_epoch, 1);
    }
  }

  // Blocks until pos has executed: spin, then sleep on the stream's counter.
  void wait_pos(StreamPos pos) {
    StreamImpl* s = pos.stream;
    if (!s || spin_until([&] { return s->is_complete(pos.seq); })) return;
    waiters.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      uint32_t e = s->completed_epoch.load(std::memory_order_seq_cst);
      if (s->completed.load(std::memory_order_seq_cst) >= pos.seq) break;
      detail::futex_wait(&s->completed_epoch, e);
    }
    waiters.fetch_sub(1, std::memory_order_seq_cst);
  }

  // Caller holds mu. Releases the storages of executed tasks.
  size_t reclaim_locked() {
    submits_since_reclaim = 0;
    bytes_since_reclaim = 0;
    size_t n = 0;
    for (StreamImpl& s : streams) {
      uint64_t done = s.completed.load(std::memory_order_acquire);
      while (s.reclaimed < done) {
        uint64_t seq = ++s.reclaimed;
        if (seq - 1 - s.reclaim_seg->base == Segment::kSize) {
          // The worker finished seq, so it has moved past the old segment.
          Segment* old = s.reclaim_seg;
          s.reclaim_seg = old->next.load(std::memory_order_acquire);
          free_segments.push_back(old);
        }
        Task& t = s.reclaim_seg->slots[seq - 1 - s.reclaim_seg->base];
        release_task(t);
        ++n;
      }
    }
    return n;
  }
  void release_task(Task& t) {
    t.destroy(t);
    int n = t.num_reads + t.num_writes;
    for (int i = 0; i < n; ++i) {
      Storage* st = t.storages[i];
      if (--st->hazard.queued_refs == 0)
        inflight_bytes.store(inflight_bytes.load(std::memory_order_relaxed) - st->bytes(),
                             std::memory_order_relaxed);  // written only under mu
      st->release();
    }
  }
  uint64_t inflight_ops() const {
    uint64_t n = 0;
    for (const StreamImpl& s : streams)
      n += s.submitted - s.completed.load(std::memory_order_acquire);
    return n;
  }
  // Caller holds mu. Waits, with mu released, until some stream with queued work makes
  // progress; false if nothing is queued. Syncs, stats and other frontends go on meanwhile.
  bool wait_progress_locked() {
    for (StreamImpl& s : streams) {
      uint64_t c = s.completed.load(std::memory_order_acquire);
      if (c < s.submitted) {
        mu.unlock();
        wait_pos({&s, c + 1});
        mu.lock();
        return true;
      }
    }
    return false;
  }
  void start_worker(StreamImpl& s) {
    s.stop.store(0);
    s.worker = std::thread([&s] { s.worker_loop(); });
    s.started = true;
  }
  void record_failure(Failure* f) {
    f->retain();
    std::lock_guard lock(failures_mu);
    pending_failures.push_back(f);
  }
};

// ---- the worker ----------------------------------------------------------------------

namespace {
// Runs (or skips, or cancels) one task. Shared by workers and synchronous mode.
void execute(Engine::Task& t, Engine::State* eng, int stream_id, bool cancel) {
  int64_t start = profiler::enabled() ? profiler::detail::now_ns() : 0;
  Failure* inherited = nullptr;
  for (int i = 0; i < t.num_reads && !inherited; ++i) inherited = t.storages[i]->failure();
  Storage** writes = t.storages + t.num_reads;
  if (inherited) {
    for (int i = 0; i < t.num_writes; ++i) writes[i]->poison(inherited);
    eng->failures.fetch_add(1, std::memory_order_relaxed);  // EngineStats: skipped counts
  } else {
    Failure* f = nullptr;
    if (cancel) {
      f = Failure::create(t.op, "cancelled: the engine shut down before this op ran", t.site);
    } else {
      try {
        profiler::detail::tl_running_stream = stream_id;
        t.invoke(t);
      } catch (const std::exception& e) {
        f = Failure::create(t.op, e.what(), t.site);
      } catch (...) {
        f = Failure::create(t.op, "unknown exception", t.site);
      }
    }
    if (f) {
      for (int i = 0; i < t.num_writes; ++i) writes[i]->poison(f);
      eng->failures.fetch_add(1, std::memory_order_relaxed);
      if (!cancel) eng->record_failure(f);
      f->release();
    }
  }
  if (start && !t.is_barrier)
    profiler::detail::record_op({t.op, stream_id, t.enqueue_ns, start, profiler::detail::now_ns()});
}
}  // namespace

void StreamImpl::worker_loop() {
  uint64_t head = completed.load(std::memory_order_relaxed);
  for (;;) {
    uint64_t pub = published.load(std::memory_order_acquire);
    if (head == pub) {
      if (stop.load(std::memory_order_acquire)) {
        if (published.load(std::memory_order_acquire) == head) return;
        continue;
      }
      bool got = spin_until([&] {
        return published.load(std::memory_order_acquire) != head || stop.load() != 0;
      });
      if (!got) {
        uint32_t e = wake_epoch.load(std::memory_order_seq_cst);
        sleeping.store(true, std::memory_order_seq_cst);
        if (published.load(std::memory_order_seq_cst) == head && stop.load() == 0)
          detail::futex_wait(&wake_epoch, e);
        sleeping.store(false, std::memory_order_relaxed);
      }
      continue;
    }
    if (head - head_seg->base == Segment::kSize)
      head_seg = head_seg->next.load(std::memory_order_acquire);
    Engine::Task& t = head_seg->slots[head - head_seg->base];
    for (int i = 0; i < t.num_waits; ++i) eng->wait_pos(t.waits[i]);
    execute(t, eng, id, stop.load(std::memory_order_relaxed) == 2);
    ++head;
    completed.store(head, std::memory_order_seq_cst);
    if (eng->waiters.load(std::memory_order_seq_cst)) {
      completed_epoch.fetch_add(1, std::memory_order_seq_cst);
      detail::futex_wake(&completed_epoch, INT32_MAX);
    }
  }
}

// ---- frontend ------------------------------------------------------------------------

Engine& Engine::get() {
  static Engine* e = [] {
    Allocator::get();  // constructed first, so it outlives every storage release
    auto* eng = new Engine;
    std::atexit([] { Engine::get().shutdown(ShutdownMode::drain); });
    return eng;
  }();
  return *e;
}

Engine::Engine() : s_(new State) {
  s_->add_stream(Device::cpu());
  if (const char* m = std::getenv("TIDE_ENGINE")) {
    std::string v = m;
    TIDE_CHECK(v == "sync" || v == "async", "engine", "TIDE_ENGINE must be 'sync' or 'async', got '",
               v, "'");
    s_->synchronous = v == "sync";
  }
  Allocator::get().set_reclaim([] {
    State& st = *Engine::get().s_;
    std::lock_guard<SpinLock> lock(st.mu);
    size_t freed = st.reclaim_locked();
    if (st.wait_progress_locked()) {
      st.reclaim_locked();
      return true;
    }
    return freed > 0;
  });
}

Engine::~Engine() {
  shutdown(ShutdownMode::drain);
  delete s_;
}

namespace {
// Adds pos to the task's waits unless complete or already covered. Caller holds the lock.
void add_wait(Engine::Task& t, StreamPos pos, StreamImpl* self, Engine::State* st) {
  if (!pos.stream || pos.stream == self || pos.stream->is_complete(pos.seq)) return;
  for (int i = 0; i < t.num_waits; ++i)
    if (t.waits[i].stream == pos.stream) {
      t.waits[i].seq = std::max(t.waits[i].seq, pos.seq);
      return;
    }
  if (t.num_waits < Engine::Task::kMaxWaits) {
    t.waits[t.num_waits++] = pos;
    return;
  }
  // More streams than wait slots (rare): wait here, sleeping; workers never take this lock.
  st->wait_pos(pos);
}
}  // namespace

bool Engine::run_synchronously() const {
  return tl_synchronous >= 0 ? tl_synchronous == 1
                             : s_->synchronous.load(std::memory_order_relaxed);
}

namespace {
void fill_record(Engine::Task& t, const char* op, std::span<Storage* const> reads,
                 std::span<Storage* const> writes, Site site) {
  TIDE_ASSERT(reads.size() + writes.size() <= size_t(Engine::kMaxStorages),
              "too many storages for ", op);
  t.op = op;
  t.site = site;
  t.is_barrier = false;
  t.num_waits = 0;
  t.num_reads = uint8_t(reads.size());
  t.num_writes = uint8_t(writes.size());
  t.enqueue_ns = profiler::enabled() ? profiler::detail::now_ns() : 0;
}
}  // namespace

void Engine::prepare_inline(Task& t, const char* op, std::span<Storage* const> reads,
                            std::span<Storage* const> writes, Site site) {
  fill_record(t, op, reads, writes, site);
  std::copy(reads.begin(), reads.end(), t.storages);
  std::copy(writes.begin(), writes.end(), t.storages + reads.size());
  State& st = *s_;
  std::lock_guard<SpinLock> lock(st.mu);
  StreamImpl* self = tl_current_stream ? tl_current_stream : &st.streams.front();
  // After everything already queued on this stream, and after conflicting work elsewhere.
  add_wait(t, {self, self->submitted}, nullptr, &st);
  for (Storage* s : reads) add_wait(t, s->hazard.last_write, nullptr, &st);
  for (Storage* s : writes) {
    add_wait(t, s->hazard.last_write, nullptr, &st);
    for (int i = 0; i < s->hazard.num_readers; ++i) add_wait(t, s->hazard.readers[i], nullptr, &st);
  }
}

Engine::Task& Engine::begin_task(const char* op, std::span<Storage* const> reads,
                                 std::span<Storage* const> writes, Site site) {
  State& st = *s_;
  st.mu.lock();
  while (st.shutting_down) {  // workers are being joined: wait until they are restartable
    st.mu.unlock();
    std::this_thread::yield();
    st.mu.lock();
  }
  StreamImpl* self = tl_current_stream ? tl_current_stream : &st.streams.front();
  if (!self->started) st.start_worker(*self);
  if (++st.submits_since_reclaim >= State::kReclaimEvery ||
      st.bytes_since_reclaim >= State::kReclaimBytes)
    st.reclaim_locked();

  // Backpressure: block (holding the frontend lock) until the bounds allow this task.
  uint64_t max_ops = st.max_ops.load(std::memory_order_relaxed);
  uint64_t max_bytes = st.max_bytes.load(std::memory_order_relaxed);
  if (max_ops || max_bytes) {
    st.reclaim_locked();  // count only work that still holds its storages
    size_t new_bytes = 0;
    for (Storage* s : reads) new_bytes += s->hazard.queued_refs ? 0 : s->bytes();
    for (Storage* s : writes) new_bytes += s->hazard.queued_refs ? 0 : s->bytes();
    auto over = [&] {
      uint64_t ops = st.inflight_ops();
      if (ops == 0) return false;
      return (max_ops && ops >= max_ops) ||
             (max_bytes && st.inflight_bytes.load(std::memory_order_relaxed) + new_bytes > max_bytes);
    };
    if (over()) {
      int64_t t0 = steady_ns();
      st.bp_stalls.fetch_add(1, std::memory_order_relaxed);
      while (over()) {
        st.wait_progress_locked();
        st.reclaim_locked();
        // A storage may have been released by reclaim: recount what this task adds.
        new_bytes = 0;
        for (Storage* s : reads) new_bytes += s->hazard.queued_refs ? 0 : s->bytes();
        for (Storage* s : writes) new_bytes += s->hazard.queued_refs ? 0 : s->bytes();
      }
      st.bp_stall_ns.fetch_add(uint64_t(steady_ns() - t0), std::memory_order_relaxed);
    }
  }

  uint64_t seq = self->submitted + 1;
  if (seq - 1 - self->tail_seg->base == Segment::kSize) {
    Segment* g = st.new_segment(seq - 1);
    self->tail_seg->next.store(g, std::memory_order_release);
    self->tail_seg = g;
  }
  Task& t = self->tail_seg->slots[seq - 1 - self->tail_seg->base];
  fill_record(t, op, reads, writes, site);
  t.seq = seq;
  Storage** slot = t.storages;
  auto hold = [&](Storage* s) {
    s->retain();
    if (s->hazard.queued_refs++ == 0) {
      st.inflight_bytes.store(st.inflight_bytes.load(std::memory_order_relaxed) + s->bytes(),
                             std::memory_order_relaxed);  // written only under mu
      st.bytes_since_reclaim += s->bytes();
    }
    *slot++ = s;
  };
  for (Storage* s : reads) {
    hold(s);
    add_wait(t, s->hazard.last_write, self, &st);
  }
  for (Storage* s : writes) {
    hold(s);
    add_wait(t, s->hazard.last_write, self, &st);
    for (int i = 0; i < s->hazard.num_readers; ++i) add_wait(t, s->hazard.readers[i], self, &st);
  }
  // Update the hazard state: this task is now the last writer / a reader.
  for (Storage* s : reads) {
    // Written too (in place): the write below makes this task the last writer and clears
    // the readers, so registering the read could only block on a full reader list.
    if (std::find(writes.begin(), writes.end(), s) != writes.end()) continue;
    HazardState& h = s->hazard;
    bool found = false;
    for (int i = 0; i < h.num_readers; ++i)
      if (h.readers[i].stream == self) {
        h.readers[i].seq = seq;
        found = true;
      }
    if (found) continue;
    if (h.num_readers == HazardState::kInlineReaders) {  // drop finished readers
      int k = 0;
      for (int i = 0; i < h.num_readers; ++i)
        if (!h.readers[i].stream->is_complete(h.readers[i].seq)) h.readers[k++] = h.readers[i];
      h.num_readers = k;
      if (k == HazardState::kInlineReaders) {
        // Too many streams read it: this task takes over the oldest reader's entry by
        // waiting for it, so later writers, who wait for this task, stay ordered after both.
        add_wait(t, h.readers[0], self, &st);
        std::copy(h.readers + 1, h.readers + k, h.readers);
        h.num_readers = k - 1;
      }
    }
    h.readers[h.num_readers++] = {self, seq};
  }
  for (Storage* s : writes) {
    s->hazard.last_write = {self, seq};
    s->hazard.num_readers = 0;
  }
  return t;
}

void Engine::end_task(Task& t) {
  State& st = *s_;
  StreamImpl* self = tl_current_stream ? tl_current_stream : &st.streams.front();
  self->submitted = t.seq;
  if (profiler::enabled()) {
    uint64_t depth = st.inflight_ops();
    profiler::detail::record_counters({t.enqueue_ns, depth,
                                       st.inflight_bytes.load(std::memory_order_relaxed),
                                       Allocator::get().stats().active_bytes});
  }
  // seq_cst store and load: with the worker's seq_cst `sleeping` store and `published`
  // load, either it sees this task or we see it asleep (no lost wake-up).
  self->published.store(t.seq, std::memory_order_seq_cst);
  if (self->sleeping.load(std::memory_order_seq_cst)) State::wake_worker(*self);
  st.mu.unlock();
}

void Engine::run_inline(Task& t) {
  for (int i = 0; i < t.num_waits; ++i) s_->wait_pos(t.waits[i]);
  execute(t, s_, -1, false);
  t.destroy(t);
}

// ---- syncs ---------------------------------------------------------------------------

void Engine::wait_for_write(Storage* s) {
  StreamPos pos;
  {
    std::lock_guard<SpinLock> lock(s_->mu);
    s_->reclaim_locked();
    pos = s->hazard.last_write;
  }
  s_->wait_pos(pos);
}

bool Engine::write_done(Storage* s) {
  std::lock_guard<SpinLock> lock(s_->mu);
  StreamPos pos = s->hazard.last_write;
  return !pos.stream || pos.stream->is_complete(pos.seq);
}

void Engine::wait_to_read(Storage* s) {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]] c->host_read("wait_to_read");
  wait_for_write(s);
  if (Failure* f = s->failure()) f->rethrow();
}

void Engine::synchronize() {
  StreamPos tails[kMaxStreams];
  int n = 0;
  {
    std::lock_guard<SpinLock> lock(s_->mu);
    for (StreamImpl& s : s_->streams) tails[n++] = {&s, s.submitted};
  }
  for (int i = 0; i < n; ++i) s_->wait_pos(tails[i]);
  std::lock_guard<SpinLock> lock(s_->mu);
  s_->reclaim_locked();
}

void Engine::wait_all() {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]] c->host_read("wait_all");
  synchronize();
  Failure* earliest = nullptr;
  {
    std::lock_guard lock(s_->failures_mu);
    for (Failure* f : s_->pending_failures)
      if (!f->reported() && (!earliest || f->order() < earliest->order())) earliest = f;
    if (earliest) earliest->retain();
    for (Failure* f : s_->pending_failures) {
      f->mark_reported();
      f->release();
    }
    s_->pending_failures.clear();
  }
  if (earliest) {
    std::unique_ptr<Failure, void (*)(Failure*)> hold(earliest, [](Failure* f) { f->release(); });
    earliest->rethrow();
  }
}

void Engine::shutdown(ShutdownMode mode) {
  State& st = *s_;
  std::vector<StreamImpl*> stopping;
  {
    std::lock_guard<SpinLock> lock(st.mu);
    while (st.shutting_down) {  // another thread is shutting down: wait for it to finish
      st.mu.unlock();
      std::this_thread::yield();
      st.mu.lock();
    }
    st.shutting_down = true;  // new submits wait; syncs and stats still work
    for (StreamImpl& s : st.streams) {
      if (!s.started) continue;
      s.stop.store(mode == ShutdownMode::cancel ? 2 : 1, std::memory_order_seq_cst);
      s.wake_epoch.fetch_add(1, std::memory_order_seq_cst);
      detail::futex_wake(&s.wake_epoch, 1);
      stopping.push_back(&s);
    }
  }
  for (StreamImpl* s : stopping) s->worker.join();  // without the lock: kernels may sync
  std::lock_guard<SpinLock> lock(st.mu);
  for (StreamImpl* s : stopping) s->started = false;
  st.reclaim_locked();
  st.shutting_down = false;
}

void Engine::reclaim() {
  std::lock_guard<SpinLock> lock(s_->mu);
  s_->reclaim_locked();
}

EngineStats Engine::stats() const {
  EngineStats r;
  std::lock_guard<SpinLock> lock(s_->mu);
  s_->reclaim_locked();
  for (const StreamImpl& s : s_->streams) {
    r.queued += s.submitted;
    r.executed += s.completed.load(std::memory_order_acquire);
  }
  r.queue_depth = r.queued - r.executed;
  r.inflight_bytes = s_->inflight_bytes.load(std::memory_order_relaxed);
  r.backpressure_stalls = s_->bp_stalls.load(std::memory_order_relaxed);
  r.backpressure_stall_ns = s_->bp_stall_ns.load(std::memory_order_relaxed);
  r.failures = s_->failures.load(std::memory_order_relaxed);
  return r;
}

void Engine::set_max_inflight_ops(uint64_t n) { s_->max_ops.store(n); }
void Engine::set_max_inflight_bytes(size_t n) { s_->max_bytes.store(n); }
uint64_t Engine::max_inflight_ops() const { return s_->max_ops.load(); }
size_t Engine::max_inflight_bytes() const { return s_->max_bytes.load(); }
void Engine::set_synchronous(bool on) { s_->synchronous.store(on); }
bool Engine::synchronous() const { return s_->synchronous.load(); }

// ---- streams and events --------------------------------------------------------------

Stream Stream::create(Device d) {
  TIDE_CHECK(d.is_cpu(), "stream", "cannot create a stream on ", d.str(),
             ": this build has no CUDA backend");
  Engine::State& st = *Engine::get().s_;
  std::lock_guard<SpinLock> lock(st.mu);
  return Stream(&st.add_stream(d));
}

Stream Stream::default_stream(Device d) {
  TIDE_CHECK(d.is_cpu(), "stream", "no default stream on ", d.str(),
             ": this build has no CUDA backend");
  return Stream(&Engine::get().s_->streams.front());
}

Stream Stream::current(Device d) {
  if (tl_current_stream && tl_current_stream->device == d) return Stream(tl_current_stream);
  return default_stream(d);
}

Event Stream::record() const {
  std::lock_guard<SpinLock> lock(impl_->eng->mu);
  Event e;
  e.pos_ = {impl_, impl_->submitted};
  return e;
}

void Stream::wait(const Event& e) const {
  if (!e.valid() || e.pos_.stream == impl_) return;
  StreamGuard g(*this);
  Engine& eng = Engine::get();
  auto noop = [](Engine::Task&) {};
  if (eng.run_synchronously()) {  // nothing is queued here: wait on the host
    e.synchronize();
    return;
  }
  // A task with no storages whose only job is to wait for e on the worker.
  Engine::Task& t = eng.begin_task("stream_wait", {}, {}, std::source_location::current());
  t.invoke = t.destroy = noop;
  t.is_barrier = true;
  add_wait(t, e.pos_, impl_, eng.s_);
  eng.end_task(t);
}

void Stream::synchronize() const { record().synchronize(); }
int Stream::id() const { return impl_->id; }
Device Stream::device() const { return impl_->device; }
uint64_t Stream::queued() const {
  std::lock_guard<SpinLock> lock(impl_->eng->mu);
  return impl_->submitted;
}
uint64_t Stream::executed() const { return impl_->completed.load(std::memory_order_acquire); }

bool Event::query() const { return !pos_.stream || pos_.stream->is_complete(pos_.seq); }
void Event::synchronize() const {
  if (pos_.stream) pos_.stream->eng->wait_pos(pos_);
}

StreamGuard::StreamGuard(const Stream& s) : prev_(tl_current_stream) {
  tl_current_stream = s.impl();
}
StreamGuard::~StreamGuard() { tl_current_stream = prev_; }

SynchronousGuard::SynchronousGuard(bool on) : prev_(tl_synchronous) { tl_synchronous = on ? 1 : 0; }
SynchronousGuard::~SynchronousGuard() { tl_synchronous = prev_; }

}  // namespace tide
