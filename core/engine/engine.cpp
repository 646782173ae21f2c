// The engine's frontend: the submit path (lock, reclaim batch, backpressure, slot, hazards,
// publish), syncs, shutdown and stats. The pieces it orchestrates live beside it: hazard
// tracking (hazards.h), backpressure rules (backpressure.h), reclaim (reclaim.h), the
// worker and the CPU device (stream_worker.cpp), other devices (device_stream.h).
#include "core/engine/engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "core/allocator.h"
#include "core/engine/asymmetric_fence.h"
#include "core/engine/backpressure.h"
#include "core/engine/engine_impl.h"
#include "core/engine/failure.h"
#include "core/engine/futex.h"
#include "core/engine/hazards.h"
#include "core/error.h"
#include "core/memory_record.h"
#include "core/profiler.h"

namespace tide {

namespace {
constexpr int kMaxStreams = 64;
constexpr int kMaxGpus = 16;

thread_local StreamImpl* tl_current_stream = nullptr;
thread_local int tl_synchronous = -1;  // -1: follow the engine setting

// More hazards than a task has wait slots (rare): wait here, on the host. Workers never
// take the engine lock, so this cannot deadlock with them.
void wait_on_host(void* state, StreamPos pos) { static_cast<Engine::State*>(state)->wait_pos(pos); }
}  // namespace

// ---- engine state ----------------------------------------------------------------------

namespace {
std::atomic<StreamImpl*> g_gpu_default[kMaxGpus] = {};  // written under the engine lock

// The stream an allocation on device d is for: the calling worker's own, else the calling
// thread's current stream of d (stream-tagged GPU blocks, core/allocator.h).
StreamImpl* allocation_stream(Device d) {
  if (StreamImpl* w = detail::tl_running_task.stream; w && w->device == d) return w;
  if (tl_current_stream && tl_current_stream->device == d) return tl_current_stream;
  return d.is_cuda() && d.index >= 0 && d.index < kMaxGpus
             ? g_gpu_default[d.index].load(std::memory_order_acquire)
             : nullptr;
}
}  // namespace

StreamImpl& Engine::State::add_stream(Device d) {
  TIDE_CHECK(int(streams.size()) < kMaxStreams, "stream", "at most ", kMaxStreams,
             " streams; streams live as long as the engine, so create them once");
  StreamImpl& s = streams.emplace_back(this, int(streams.size()), d);
  try {
    s.dev = make_device_stream(s);
  } catch (...) {
    streams.pop_back();
    throw;
  }
  s.tail_seg = s.reclaim_seg = s.head_seg = new Segment;
  profiler::detail::register_stream(s.id, d.str());
  return s;
}

StreamImpl& Engine::State::default_stream(Device d) {
  if (d.is_cpu()) return streams.front();
  TIDE_CHECK(d.index >= 0 && d.index < kMaxGpus, "stream", "no device ", d.str(), " (at most ",
             kMaxGpus, " GPUs)");
  StreamImpl* s = g_gpu_default[d.index].load(std::memory_order_acquire);
  if (!s) {
    s = &add_stream(d);
    g_gpu_default[d.index].store(s, std::memory_order_release);
  }
  return *s;
}

StreamImpl& Engine::State::current_stream(Device d) {
  if (tl_current_stream && tl_current_stream->device == d) return *tl_current_stream;
  if (d.is_cpu()) [[likely]]
    return streams.front();  // default_stream's CPU case, no call
  return default_stream(d);
}

Segment* Engine::State::new_segment(uint64_t base) {
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

namespace {
// Positions a task must wait for beyond its Task::kMaxWaits slots. One per stream at most,
// since a task's waits on one stream collapse into one.
struct PendingWaits {
  PendingWaits() {}  // leaves pos uninitialised: this is on every submit's path
  union {
    StreamPos pos[kMaxStreams];
  };
  int n = 0;
  static void add(void* self, StreamPos p) {
    auto& w = *static_cast<PendingWaits*>(self);
    for (int i = 0; i < w.n; ++i)
      if (w.pos[i].stream == p.stream) {
        w.pos[i].seq = std::max(w.pos[i].seq, p.seq);
        return;
      }
    w.pos[w.n++] = p;
  }
};

// True when the calling thread is the worker of pos's stream running a task at or before
// pos: waiting for pos would wait for the waiter itself.
bool waits_on_itself(StreamPos pos) {
  const StreamPos running = detail::tl_running_task;
  return running.stream == pos.stream && pos.seq >= running.seq;
}
}  // namespace

void Engine::State::wait_pos(StreamPos pos) {
  StreamImpl* s = pos.stream;
  if (!s || s->is_complete(pos.seq)) return;
  TIDE_CHECK(!waits_on_itself(pos), "sync", "a task running on stream ", s->id, " (op #",
             detail::tl_running_task.seq, ") waits for op #", pos.seq,
             " of its own stream, which runs after it: it would wait for ever. A kernel may "
             "only wait for work queued before it or on other streams");
  if (detail::spin_until([&] { return s->is_complete(pos.seq); })) return;
  s->dev->block_until(pos.seq);
}

void Engine::State::sync_pos(StreamPos pos) {
  StreamImpl* s = pos.stream;
  if (!s || s->is_complete(pos.seq)) return;
  if (s->polled || waits_on_itself(pos)) return wait_pos(pos);
  // Run the tasks up to pos here while the worker does not (it may be asleep, or waiting
  // for a core); while it does, watch for it to stop before pos. Spinning and then
  // sleeping as wait_pos does when it keeps the token.
  auto done = [&] {
    if (s->is_complete(pos.seq)) return true;
    if (s->runnable_here(pos.seq)) s->run_published(pos.seq);
    return s->is_complete(pos.seq);
  };
  if (detail::spin_until(done)) return;
  s->dev->block_until(pos.seq);
}

uint64_t Engine::State::inflight_ops() const {
  uint64_t n = 0;
  for (const StreamImpl& s : streams) n += s.submitted - s.done();
  return n;
}

bool Engine::State::wait_progress_locked() {
  for (StreamImpl& s : streams) {
    uint64_t c = s.done();
    if (c < s.submitted && !waits_on_itself({&s, c + 1})) {
      mu.unlock();
      sync_pos({&s, c + 1});
      mu.lock();
      return true;
    }
  }
  return false;
}

void Engine::State::start_worker(StreamImpl& s) {
  s.stop.store(0);
  s.worker = std::thread([&s] { s.worker_loop(); });
  s.started = true;
}

void Engine::State::record_failure(Failure* f) {
  f->retain();
  std::lock_guard lock(failures_mu);
  pending_failures.push_back(f);
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
    TIDE_CHECK(v == "sync" || v == "async", "engine",
               "TIDE_ENGINE must be 'sync' or 'async', got '", v, "'");
    s_->synchronous = v == "sync";
  }
  if (const char* m = std::getenv("TIDE_ALLOC")) {
    std::string v = m;
    TIDE_CHECK(v == "enqueue" || v == "execution", "engine",
               "TIDE_ALLOC must be 'enqueue' or 'execution', got '", v, "'");
    s_->alloc_at_execution = v == "execution";
  }
  detail::enable_asymmetric_fence();  // before any worker starts (end_task's fence)
  Allocator::set_stream_of(&allocation_stream);
  Allocator::set_try_reclaim([] {  // workers too: try_lock never waits for a frontend
    State& st = *Engine::get().s_;
    if (!st.mu.try_lock()) return false;
    size_t n = st.reclaim_locked();
    st.mu.unlock();
    return n > 0;
  });
  Allocator::set_reclaim([] {
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

bool Engine::run_synchronously() const {
  return tl_synchronous >= 0 ? tl_synchronous == 1
                             : s_->synchronous.load(std::memory_order_relaxed);
}

namespace {
// Inlined into begin_task: as a call it cost ~30 instructions per op more.
[[gnu::always_inline]] inline void fill_record(Engine::Task& t, const char* op,
                                               std::span<Storage* const> reads,
                                               std::span<Storage* const> writes, Site site) {
  TIDE_ASSERT(reads.size() + writes.size() <= size_t(Engine::kMaxStorages),
              "too many storages for ", op);
  t.op = op;
  t.site = site;
  t.is_barrier = false;
  t.replaces = detail::tl_replacing_write;
  t.num_waits = 0;
  t.num_reads = uint8_t(reads.size());
  t.num_writes = uint8_t(writes.size());
  t.enqueue_ns = profiler::enabled() ? profiler::detail::now_ns() : 0;
}
}  // namespace

void Engine::prepare_inline(Task& t, Device device, const char* op, std::span<Storage* const> reads,
                            std::span<Storage* const> writes, Site site) {
  fill_record(t, op, reads, writes, site);
  std::copy(reads.begin(), reads.end(), t.storages);
  std::copy(writes.begin(), writes.end(), t.storages + reads.size());
  State& st = *s_;
  for (;;) {
    PendingWaits pending;
    {
      std::lock_guard<SpinLock> lock(st.mu);
      bool reading = false;  // a host read of a written storage: let it finish (begin_task)
      for (Storage* w : writes) reading |= w->host_readers().load(std::memory_order_acquire) != 0;
      if (reading) {
        std::this_thread::yield();
        continue;
      }
      StreamImpl& self = st.current_stream(device);
      self.dev->check_usable(op);
      t.stream = &self;
      t.num_waits = 0;
      // After everything already queued on this stream, and after conflicting work elsewhere.
      add_wait(t, {&self, self.submitted}, nullptr, &PendingWaits::add, &pending);
      collect_hazards(t, reads, writes, nullptr, &PendingWaits::add, &pending);
      if (pending.n == 0) {
        if (memory::detail::on()) [[unlikely]]
          memory::detail::on_submit(writes.data(), writes.size(), op, site.file_name(), site.line(),
                                    self.id);
        return;
      }
    }
    // More streams than the task's wait slots: wait without the lock, then look again.
    for (int i = 0; i < pending.n; ++i) st.wait_pos(pending.pos[i]);
  }
}

void Engine::run_inline(Task& t) {
  for (int i = 0; i < t.num_waits; ++i) s_->wait_pos(t.waits[i]);
  execute_task(t, s_, *t.stream->dev, false, true);
  t.destroy(t);
}

void Engine::State::wait_out_shutdown_locked() {
  while (shutting_down) {
    mu.unlock();
    std::this_thread::yield();
    mu.lock();
  }
}

void Engine::State::apply_backpressure_locked(BackpressureBounds bounds,
                                              std::span<Storage* const> reads,
                                              std::span<Storage* const> writes) {
  reclaim_locked();  // count only work that still holds its storages
  auto over = [&] {
    return over_bounds(bounds, inflight_ops(), reclaimer.inflight_bytes(),
                       added_bytes(reads, writes));
  };
  if (!over()) return;
  int64_t t0 = detail::steady_ns();
  bp_stalls.fetch_add(1, std::memory_order_relaxed);
  while (over()) {
    wait_progress_locked();
    reclaim_locked();
  }
  bp_stall_ns.fetch_add(uint64_t(detail::steady_ns() - t0), std::memory_order_relaxed);
  // The stall released the lock: a shutdown may have stopped the workers meanwhile.
  // Publishing on a stream without a worker would lose the task.
  wait_out_shutdown_locked();
}

namespace {
// The hot pieces of begin_task, inlined into it like fill_record; called with st.mu held.

// When a host read of one of `writes` is in progress (Engine::HostRead), waits for it
// without the lock and returns true: the caller starts over, since others may have queued
// work meanwhile. False, having waited for nothing, otherwise.
[[gnu::always_inline]] inline bool wait_for_host_reads(Engine::State& st,
                                                       std::span<Storage* const> writes) {
  for (Storage* w : writes)
    if (w->host_readers().load(std::memory_order_acquire) != 0) [[unlikely]] {
      st.mu.unlock();
      while (w->host_readers().load(std::memory_order_acquire) != 0) std::this_thread::yield();
      st.mu.lock();
      return true;
    }
  return false;
}

// Task slot `seq` (1-based) of s's queue, linking a new segment when the tail is full.
[[gnu::always_inline]] inline Engine::Task& next_slot(Engine::State& st, StreamImpl& s,
                                                      uint64_t seq) {
  if (seq - 1 - s.tail_seg->base == Segment::kSize) [[unlikely]] {
    Segment* g = st.new_segment(seq - 1);
    s.tail_seg->next.store(g, std::memory_order_release);
    s.tail_seg = g;
  }
  return s.tail_seg->slots[seq - 1 - s.tail_seg->base];
}
}  // namespace

Engine::Task& Engine::begin_task(Device device, const char* op, std::span<Storage* const> reads,
                                 std::span<Storage* const> writes, Site site) {
  State& st = *s_;
  st.mu.lock();
retry:
  // Workers are being joined: wait until they are restartable.
  if (st.shutting_down) [[unlikely]]
    st.wait_out_shutdown_locked();
  StreamImpl* self;
  try {
    self = &st.current_stream(device);
    if (self->polled) self->dev->check_usable(op);  // a GPU may have failed
  } catch (...) {
    st.mu.unlock();
    throw;
  }
  if (st.reclaimer.note_submit()) st.reclaim_locked();
  // Backpressure: block (holding the frontend lock) until the bounds allow this task.
  BackpressureBounds bounds{st.max_ops.load(std::memory_order_relaxed),
                            st.max_bytes.load(std::memory_order_relaxed)};
  if (bounds.any()) st.apply_backpressure_locked(bounds, reads, writes);
  if (!self->started) st.start_worker(*self);
  // A host read of a storage this task writes is in progress (Engine::HostRead): let it
  // finish first, without the lock; it waits only for work queued before it. (Checked
  // after the last place above that may release the lock.)
  if (wait_for_host_reads(st, writes)) goto retry;

  uint64_t seq = self->submitted + 1;
  Task& t = next_slot(st, *self, seq);
  fill_record(t, op, reads, writes, site);
  t.seq = seq;
  t.stream = self;
  // Waits that do not fit in the task (more than Task::kMaxWaits other streams) are waited
  // for here, without the lock (sleeping under it stalled every other
  // frontend thread); then everything is checked again, since other threads may have
  // queued work meanwhile. Nothing has changed the hazard state or published the slot yet.
  PendingWaits pending;
  collect_hazards(t, reads, writes, self, &PendingWaits::add, &pending);
  add_takeover_waits(t, reads, writes, self, &PendingWaits::add, &pending);
  if (pending.n > 0) {
    st.mu.unlock();
    for (int i = 0; i < pending.n; ++i) st.wait_pos(pending.pos[i]);
    st.mu.lock();
    goto retry;
  }
  Storage** slot = t.storages;
  for (Storage* s : reads) {
    st.reclaimer.hold(s);
    *slot++ = s;
  }
  for (Storage* s : writes) {
    st.reclaimer.hold(s);
    *slot++ = s;
  }
  // Its takeover waits are in t already (add_takeover_waits): the callback is not called.
  record_access(t, reads, writes, {self, seq}, wait_on_host, &st);
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_submit(writes.data(), writes.size(), op, site.file_name(), site.line(),
                              self->id);
  return t;
}

void Engine::end_task(Task& t) {
  State& st = *s_;
  StreamImpl* self = t.stream;
  for (int i = 0; i < t.num_waits; ++i)
    t.waits[i].stream->dev->will_be_waited(t.waits[i].seq, *self);
  self->submitted = t.seq;
  if (profiler::enabled()) {
    uint64_t depth = st.inflight_ops();
    profiler::detail::record_counters({t.enqueue_ns, depth, st.reclaimer.inflight_bytes(),
                                       Allocator::get().stats().active_bytes});
  }
  // With the worker's `sleeping` store, heavy fence and `published` load, either it sees
  // this task or we see it asleep (no lost wake-up). The light fence is only a compiler
  // barrier where membarrier works: a full fence here would wait for this task's lines to
  // reach the worker's core (core/engine/asymmetric_fence.h).
  self->published.store(t.seq, std::memory_order_release);
  detail::light_fence();
  if (self->sleeping.load(std::memory_order_relaxed)) self->wake();
  // The next slot's lines were last read by the worker (a recycled segment): ask for them
  // for writing now, so that the next submit does not stall on their transfer.
  if (t.seq - self->tail_seg->base < uint64_t(Segment::kSize)) {
    const char* next = reinterpret_cast<const char*>(&t + 1);
    for (size_t b = 0; b < sizeof(Task); b += 64) detail::prefetch_for_write(next + b);
  }
  st.mu.unlock();
}

// ---- syncs ---------------------------------------------------------------------------

void Engine::wait_for_write(Storage* s) {
  StreamPos pos;
  {
    std::lock_guard<SpinLock> lock(s_->mu);
    s_->reclaim_locked();
    pos = s->hazard.last_write;
  }
  s_->sync_pos(pos);
}

Engine::HostRead::HostRead(Storage* s, bool rethrow) : s_(s) {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    c->host_read("wait_to_read");
  State& st = *Engine::get().s_;
  // Registered under the lock: a write submitted later waits in its submit until the read
  // is over (wait_for_host_reads); writes queued before are what the read waits for.
  StreamPos pos;
  {
    std::lock_guard<SpinLock> lock(st.mu);
    st.reclaim_locked();
    pos = s->hazard.last_write;
    s->host_readers().fetch_add(1, std::memory_order_relaxed);
  }
  try {
    st.sync_pos(pos);
  } catch (...) {
    s->host_readers().fetch_sub(1, std::memory_order_release);
    throw;
  }
  if (rethrow)
    if (Failure* f = s->failure()) {
      try {
        f->rethrow();  // copies the message while the registration keeps f alive
      } catch (...) {
        s->host_readers().fetch_sub(1, std::memory_order_release);
        throw;
      }
    }
}

bool Engine::write_done(Storage* s) {
  std::lock_guard<SpinLock> lock(s_->mu);
  StreamPos pos = s->hazard.last_write;
  return !pos.stream || pos.stream->is_complete(pos.seq);
}

int Engine::owner_count(Storage* s) {
  std::lock_guard<SpinLock> lock(s_->mu);
  return s->use_count() - Reclaimer::references_held(s);
}

void Engine::wait_to_read(Storage* s) {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    c->host_read("wait_to_read");
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
  for (int i = 0; i < n; ++i) s_->sync_pos(tails[i]);
  std::lock_guard<SpinLock> lock(s_->mu);
  s_->reclaim_locked();
}

void Engine::wait_all() {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    c->host_read("wait_all");
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
    st.wait_out_shutdown_locked();  // another thread is shutting down: wait for it to finish
    st.shutting_down = true;        // new submits wait; syncs and stats still work
    for (StreamImpl& s : st.streams) {
      if (!s.started) continue;
      s.stop.store(mode == ShutdownMode::cancel ? 2 : 1, std::memory_order_seq_cst);
      s.wake_epoch.fetch_add(1, std::memory_order_seq_cst);
      detail::futex_wake(&s.wake_epoch, 1);
      stopping.push_back(&s);
    }
  }
  for (StreamImpl* s : stopping) s->worker.join();  // without the lock: kernels may sync
  // A device completes launched work after the worker has gone: wait for it, so that
  // reclaim releases every storage (CPU streams are complete already).
  for (StreamImpl* s : stopping) st.wait_pos({s, s->issued.load(std::memory_order_acquire)});
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
    r.executed += s.done();
  }
  r.queue_depth = r.queued - r.executed;
  r.inflight_bytes = s_->reclaimer.inflight_bytes();
  r.backpressure_stalls = s_->bp_stalls.load(std::memory_order_relaxed);
  r.backpressure_stall_ns = s_->bp_stall_ns.load(std::memory_order_relaxed);
  r.failures = s_->failures.load(std::memory_order_relaxed);
  return r;
}

size_t Engine::inflight_bytes() const { return s_->reclaimer.inflight_bytes(); }

void Engine::run_locked(const std::function<void()>& fn) {
  std::lock_guard<SpinLock> lock(s_->mu);
  fn();
}

void Engine::set_max_inflight_ops(uint64_t n) { s_->max_ops.store(n); }
void Engine::set_max_inflight_bytes(size_t n) { s_->max_bytes.store(n); }
uint64_t Engine::max_inflight_ops() const { return s_->max_ops.load(); }
size_t Engine::max_inflight_bytes() const { return s_->max_bytes.load(); }
void Engine::set_synchronous(bool on) { s_->synchronous.store(on); }
bool Engine::synchronous() const { return s_->synchronous.load(); }
void Engine::set_allocation(Allocation a) {
  s_->alloc_at_execution.store(a == Allocation::at_execution);
}
Allocation Engine::allocation() const {
  return s_->alloc_at_execution.load() ? Allocation::at_execution : Allocation::at_enqueue;
}
bool Engine::allocates_at_execution() const {
  return s_->alloc_at_execution.load(std::memory_order_relaxed) && !run_synchronously();
}

// ---- streams and events --------------------------------------------------------------

Stream Stream::create(Device d) {
  Engine::State& st = *Engine::get().s_;
  std::lock_guard<SpinLock> lock(st.mu);
  return Stream(&st.add_stream(d));
}

Stream Stream::default_stream(Device d) {
  Engine::State& st = *Engine::get().s_;
  if (d.is_cpu()) return Stream(&st.streams.front());
  std::lock_guard<SpinLock> lock(st.mu);
  return Stream(&st.default_stream(d));
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
  if (eng.run_synchronously()) {  // nothing is queued here: wait on the host
    e.synchronize();
    return;
  }
  // A task with no storages whose only job is to wait for e on the worker.
  Engine::Task& t =
      eng.begin_task(impl_->device, "stream_wait", {}, {}, tide::SourceLocation::current());
  t.invoke = [](Engine::Task&, const KernelContext&) {};
  t.destroy = [](Engine::Task&) {};
  t.is_barrier = true;
  add_wait(t, e.pos_, impl_, wait_on_host, eng.s_);
  eng.end_task(t);
}

void Stream::synchronize() const { record().synchronize(); }
int Stream::id() const { return impl_->id; }
Device Stream::device() const { return impl_->device; }
uint64_t Stream::queued() const {
  std::lock_guard<SpinLock> lock(impl_->eng->mu);
  return impl_->submitted;
}
uint64_t Stream::executed() const { return impl_->done(); }

bool Event::query() const { return !pos_.stream || pos_.stream->is_complete(pos_.seq); }
void Event::synchronize() const {
  if (pos_.stream) pos_.stream->eng->sync_pos(pos_);
}

StreamGuard::StreamGuard(const Stream& s) : prev_(tl_current_stream) {
  tl_current_stream = s.impl();
}
StreamGuard::~StreamGuard() { tl_current_stream = prev_; }

SynchronousGuard::SynchronousGuard(bool on) : prev_(tl_synchronous) { tl_synchronous = on ? 1 : 0; }
SynchronousGuard::~SynchronousGuard() { tl_synchronous = prev_; }

}  // namespace tide
