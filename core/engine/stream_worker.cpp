// The stream worker: takes published tasks in order, makes them wait for their hazards,
// runs them through the stream's DeviceStream, and publishes progress. Also the CPU's
// DeviceStream, where "complete" means the worker ran the task.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <thread>

#include "core/engine/asymmetric_fence.h"
#include "core/engine/engine_impl.h"
#include "core/engine/failure.h"
#include "core/engine/futex.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tide {

namespace {

class CpuStream final : public DeviceStream {
 public:
  explicit CpuStream(StreamImpl& owner) : DeviceStream(owner) {
    ctx_.device = owner.device;
    ctx_.stream_id = owner.id;
  }
  void run_inline(Engine::Task& t) override {
    KernelContext c = ctx_;
    c.stream_id = -1;
    t.invoke(t, c);
  }
  void retire(uint64_t seq) override {
    owner_.issued.store(seq, std::memory_order_relaxed);
    owner_.completed.store(seq, std::memory_order_seq_cst);
    if (owner_.eng->waiters.load(std::memory_order_seq_cst)) {
      owner_.completed_epoch.fetch_add(1, std::memory_order_seq_cst);
      detail::futex_wake(&owner_.completed_epoch, INT32_MAX);
    }
  }
  void block_until(uint64_t seq) override {
    Engine::State& eng = *owner_.eng;
    eng.waiters.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      uint32_t e = owner_.completed_epoch.load(std::memory_order_seq_cst);
      if (owner_.completed.load(std::memory_order_seq_cst) >= seq) break;
      detail::futex_wait(&owner_.completed_epoch, e);
    }
    eng.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
};

}  // namespace

std::unique_ptr<DeviceStream> make_cpu_stream(StreamImpl& s) {
  return std::make_unique<CpuStream>(s);
}

// A task on another CPU stream whose worker does not run is run here (sync_pos).
void DeviceStream::wait_for(StreamPos pos) { owner_.eng->sync_pos(pos); }

void execute_task(Engine::Task& t, Engine::State* eng, DeviceStream& dev, bool cancel,
                  bool inline_run) {
  int stream_id = inline_run ? -1 : dev.context().stream_id;
  int64_t start = profiler::enabled() ? profiler::detail::now_ns() : 0;
  Storage** writes = t.storages + t.num_reads;
  auto written = [&](Storage* s) {
    return std::find(writes, writes + t.num_writes, s) != writes + t.num_writes;
  };
  Failure* inherited = nullptr;
  for (int i = 0; i < t.num_reads && !inherited; ++i)
    if (!t.replaces || !written(t.storages[i])) inherited = t.storages[i]->failure();
  if (inherited) {
    for (int i = 0; i < t.num_writes; ++i) {
      if (t.replaces) writes[i]->replace_failure(inherited);
      else writes[i]->poison(inherited);
    }
    eng->failures.fetch_add(1, std::memory_order_relaxed);  // EngineStats: skipped counts
  } else {
    Failure* f = nullptr;
    if (cancel) {
      f = Failure::create(t.op, "cancelled: the engine shut down before this op ran", t.site);
    } else {
      try {
        profiler::detail::tl_running_stream = stream_id;
        // Outputs allocated at execution take their blocks now, on this thread, so that a
        // failure fails this op (Engine::set_allocation).
        for (int i = 0; i < t.num_reads + t.num_writes; ++i)
          if (!t.storages[i]->resident()) [[unlikely]]
            t.storages[i]->materialize(t.op, false);
        if (inline_run) dev.run_inline(t);
        else dev.run(t);
      } catch (const Error& e) {  // already "[op] ...": keep the op named once
        f = Failure::create(t.op, strip_op(e.what(), t.op), t.site);
      } catch (const std::exception& e) {
        f = Failure::create(t.op, e.what(), t.site);
      } catch (...) {
        f = Failure::create(t.op, "unknown exception", t.site);
      }
    }
    if (f) {
      for (int i = 0; i < t.num_writes; ++i) {
        if (t.replaces) writes[i]->replace_failure(f);
        else writes[i]->poison(f);
      }
      eng->failures.fetch_add(1, std::memory_order_relaxed);
      if (!cancel) eng->record_failure(f);
      f->release();
    } else if (t.replaces) {
      for (int i = 0; i < t.num_writes; ++i)
        if (writes[i]->failure()) writes[i]->replace_failure(nullptr);
    }
  }
  if (start && !t.is_barrier)
    profiler::detail::record_op({t.op, stream_id, t.enqueue_ns, start, profiler::detail::now_ns()});
}

void StreamImpl::wake() {
  if (sleeping.load(std::memory_order_seq_cst) &&
      sleeping.exchange(false, std::memory_order_seq_cst)) {
    wake_epoch.fetch_add(1, std::memory_order_seq_cst);
    detail::futex_wake(&wake_epoch, 1);
  }
}

void StreamImpl::nudge() {
  nudged.store(true, std::memory_order_seq_cst);
  wake();
}

bool StreamImpl::run_published(uint64_t until) {
  bool expected = false;
  if (!running.compare_exchange_strong(expected, true, std::memory_order_acquire,
                                       std::memory_order_relaxed))
    return false;
  uint64_t head = issued.load(std::memory_order_relaxed);
  // A waiter may run a task inside another stream's task (its worker waiting on this one):
  // keep that task's identity for the rest of it.
  const StreamPos outer_task = detail::tl_running_task;
  const int outer_stream = profiler::detail::tl_running_stream;
  while (head < until && head < published.load(std::memory_order_acquire)) {
    if (head - head_seg->base == Segment::kSize)
      head_seg = head_seg->next.load(std::memory_order_acquire);
    Engine::Task& t = head_seg->slots[head - head_seg->base];
    for (int i = 0; i < t.num_waits; ++i)
      if (!t.waits[i].stream->is_complete(t.waits[i].seq)) dev->wait_for(t.waits[i]);
    detail::tl_running_task = {this, head + 1};
    execute_task(t, eng, *dev, stop.load(std::memory_order_relaxed) == 2, false);
    ++head;
    dev->retire(head);  // the slot may be reclaimed from here on
  }
  detail::tl_running_task = outer_task;
  profiler::detail::tl_running_stream = outer_stream;
  // seq_cst, with the worker's seq_cst `sleeping` store and token load: either it sees the
  // token free or we see it asleep, so work left behind is never stranded.
  running.store(false, std::memory_order_seq_cst);
  if (published.load(std::memory_order_seq_cst) > head && sleeping.load(std::memory_order_seq_cst))
    wake();
  return true;
}

void StreamImpl::worker_loop() {
  // A held worker (tests) still drains at shutdown.
  auto held = [this] { return worker_held.load(std::memory_order_relaxed) && !stop.load(); };
  // Work the worker can take: published tasks not yet run, and nobody else running them.
  auto has_work = [&](std::memory_order o) {
    return published.load(o) != issued.load(o) && !running.load(o) && !held();
  };
  for (;;) {
    if (published.load(std::memory_order_acquire) != issued.load(std::memory_order_acquire)) {
      if (!held() && run_published(UINT64_MAX)) continue;
    } else if (stop.load(std::memory_order_acquire)) {
      return;  // drained (or cancelled): nothing published is left to run
    }
    if (stop.load(std::memory_order_acquire)) {  // a waiter holds the token: let it finish
      std::this_thread::yield();
      continue;
    }
    if (polled) {  // a GPU stream: flush its timeline, record wanted events
      nudged.store(false, std::memory_order_seq_cst);
      dev->idle();
    }
    // A CPU worker looks for work every kPollPauses pauses, not at every one: each look
    // takes the `published` line from the frontend, which then pays a transfer for its next
    // publish. In between, a host that syncs runs the tasks itself (sync_pos:
    // the worker does not hold the run token while it waits), so a round trip does not
    // wait for the next look. Only while it spins: once spin_until yields (each poll is
    // then a sched_yield, up to ~1 us) it looks every time. A GPU worker looks at every
    // pause: it also flushes the device's timeline.
    unsigned pauses = 0;
    const unsigned poll_mask = polled ? 0 : kPollPauses - 1;
    bool got = detail::spin_until([&] {
      if (pauses < kSkippingPolls && (++pauses & poll_mask)) return false;
      return has_work(std::memory_order_acquire) || stop.load() != 0 ||
             nudged.load(std::memory_order_relaxed);
    });
    if (!got) {
      uint32_t e = wake_epoch.load(std::memory_order_seq_cst);
      sleeping.store(true, std::memory_order_seq_cst);
      detail::heavy_fence();  // pairs with end_task's light fence (core/engine/asymmetric_fence.h)
      if (!has_work(std::memory_order_seq_cst) && stop.load() == 0 &&
          !nudged.load(std::memory_order_seq_cst))
        detail::futex_wait(&wake_epoch, e);
      sleeping.store(false, std::memory_order_relaxed);
    }
  }
}

}  // namespace tide
