// The stream worker: takes published tasks in order, makes them wait for their hazards,
// runs them through the stream's DeviceStream, and publishes progress. Also the CPU's
// DeviceStream, where "complete" means the worker ran the task.
#include <algorithm>
#include <exception>
#include <string>
#include <string_view>

#include "core/engine_impl.h"
#include "core/error.h"
#include "core/failure.h"
#include "core/futex.h"
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

void DeviceStream::wait_for(StreamPos pos) { owner_.eng->wait_pos(pos); }

std::string strip_op(std::string_view what, const char* op) {
  std::string prefix = std::string("[") + op + "] ";
  if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  return std::string(what);
}

void execute_task(Engine::Task& t, Engine::State* eng, DeviceStream& dev, bool cancel,
                  bool inline_run) {
  int stream_id = inline_run ? -1 : dev.context().stream_id;
  int64_t start = profiler::enabled() ? profiler::detail::now_ns() : 0;
  Storage** writes = t.storages + t.num_reads;
  auto written = [&](Storage* s) { return std::find(writes, writes + t.num_writes, s) != writes + t.num_writes; };
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

void StreamImpl::worker_loop() {
  uint64_t head = issued.load(std::memory_order_relaxed);
  for (;;) {
    uint64_t pub = published.load(std::memory_order_acquire);
    if (head == pub) {
      if (stop.load(std::memory_order_acquire)) {
        if (published.load(std::memory_order_acquire) == head) return;
        continue;
      }
      if (polled) {  // a GPU stream: flush its timeline, record wanted events
        nudged.store(false, std::memory_order_seq_cst);
        dev->idle();
      }
      bool got = detail::spin_until([&] {
        return published.load(std::memory_order_acquire) != head || stop.load() != 0 ||
               nudged.load(std::memory_order_relaxed);
      });
      if (!got) {
        uint32_t e = wake_epoch.load(std::memory_order_seq_cst);
        sleeping.store(true, std::memory_order_seq_cst);
        if (published.load(std::memory_order_seq_cst) == head && stop.load() == 0 &&
            !nudged.load(std::memory_order_seq_cst))
          detail::futex_wait(&wake_epoch, e);
        sleeping.store(false, std::memory_order_relaxed);
      }
      continue;
    }
    if (head - head_seg->base == Segment::kSize)
      head_seg = head_seg->next.load(std::memory_order_acquire);
    Engine::Task& t = head_seg->slots[head - head_seg->base];
    for (int i = 0; i < t.num_waits; ++i)
      if (!t.waits[i].stream->is_complete(t.waits[i].seq)) dev->wait_for(t.waits[i]);
    detail::tl_running_task = {this, head + 1};
    execute_task(t, eng, *dev, stop.load(std::memory_order_relaxed) == 2, false);
    detail::tl_running_task = {};
    ++head;
    dev->retire(head);  // the slot may be reclaimed from here on
  }
}

}  // namespace tide
