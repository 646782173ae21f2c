// The Trainer and its sync policies (see trainer.h).
#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "core/engine.h"
#include "core/error.h"
#include "core/memory_probe.h"

namespace tide::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Restores the engine's op bound when a bounded run ends, also on error.
class OpBoundGuard {
 public:
  OpBoundGuard() : prev_(Engine::get().max_inflight_ops()) {}
  ~OpBoundGuard() { Engine::get().set_max_inflight_ops(prev_); }
  OpBoundGuard(const OpBoundGuard&) = delete;
  OpBoundGuard& operator=(const OpBoundGuard&) = delete;

 private:
  uint64_t prev_;
};

std::string fmt_double(double x) {
  if (std::isnan(x)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

const char* kCsvHeader =
    "policy,batch,t_enqueue_s,loss,queue_depth,inflight_bytes,allocator_active,active_delta,"
    "rss,rss_delta\n";

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("trainer", "cannot open '" + path + "' for writing");
  f << text;
  f.flush();
  if (!f) throw Error("trainer", "cannot write '" + path + "'");
}

}  // namespace

Policy Policy::parse(const std::string& s) {
  if (s == "per_batch") return per_batch();
  if (s == "none") return none();
  const std::string pre = "bounded:";
  if (s.rfind(pre, 0) == 0) {
    std::string v = s.substr(pre.size());
    bool digits = !v.empty() && v.size() <= 9 &&
                  std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
      int k = std::stoi(v);
      if (k >= 1) return bounded(k);
    }
    throw Error("trainer", "bounded:K needs an integer K >= 1, got '" + s + "'");
  }
  throw Error("trainer",
              "unknown sync policy '" + s + "' (expected per_batch, none or bounded:K)");
}

std::string Policy::str() const {
  switch (kind) {
    case SyncPolicy::per_batch: return "per_batch";
    case SyncPolicy::none: return "none";
    case SyncPolicy::bounded: return "bounded:" + std::to_string(k);
  }
  return "?";
}

std::string TrainResult::csv(bool header) const {
  std::ostringstream o;
  if (header) o << kCsvHeader;
  const std::string name = policy.str();
  for (const StepRecord& r : steps) {
    long long ad = (long long)r.allocator_active - (long long)baseline_active;
    long long rd = (long long)r.rss - (long long)baseline_rss;
    o << name << ',' << r.batch << ',' << fmt_double(r.t_enqueue_s) << ',' << fmt_double(r.loss)
      << ',' << r.queue_depth << ',' << r.inflight_bytes << ',' << r.allocator_active << ','
      << ad << ',' << r.rss << ',' << rd << '\n';
  }
  return o.str();
}

void TrainResult::write_csv(const std::string& path) const { write_text(path, csv(true)); }

void write_csv(const std::string& path, const std::vector<TrainResult>& results) {
  std::string text = kCsvHeader;
  for (const TrainResult& r : results) text += r.csv(false);
  write_text(path, text);
}

Trainer::Trainer(nn::Module& model, LossFn loss, Optimizer& optimizer, DataSource& source)
    : model_(model), loss_(std::move(loss)), opt_(optimizer), source_(source) {
  if (!loss_) throw Error("trainer", "the loss function is empty");
}

Tensor Trainer::step() {
  opt_.zero_grad();
  std::optional<Batch> b = source_.next_batch();
  if (!b) {
    source_.reset(++epoch_);
    b = source_.next_batch();
    if (!b) throw Error("trainer", "the data source yields no batches");
  }
  Tensor pred = model_(b->x);
  Tensor loss = loss_(pred, b->y);
  loss.backward();
  opt_.step();
  return loss;
}

TrainResult Trainer::run(const TrainerOptions& options) {
  if (options.batches < 1)
    throw Error("trainer", "batches must be >= 1, got " + std::to_string(options.batches));
  const Policy pol = options.policy;
  if (pol.kind == SyncPolicy::bounded && pol.k < 1)
    throw Error("trainer", "bounded:K needs K >= 1, got " + std::to_string(pol.k));

  Engine& eng = Engine::get();
  eng.wait_all();
  eng.reclaim();

  TrainResult res;
  res.policy = pol;
  res.steps.reserve(size_t(options.batches));
  MemorySnapshot base = memory_snapshot();
  res.baseline_active = base.allocator.active_bytes;
  res.baseline_rss = base.rss_bytes;

  OpBoundGuard bound_guard;  // restores the previous bound (a no-op for other policies)
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto t0 = Clock::now();
  Tensor loss;
  for (int i = 1; i <= options.batches; ++i) {
    const uint64_t queued_before = eng.stats().queued;
    loss = step();
    MemorySnapshot snap = memory_snapshot();
    StepRecord r;
    r.batch = i;
    r.t_enqueue_s = seconds_since(t0);
    r.loss = nan;
    r.queue_depth = snap.engine.queue_depth;
    r.inflight_bytes = snap.engine.inflight_bytes;
    r.allocator_active = snap.allocator.active_bytes;
    r.rss = snap.rss_bytes;
    if (i == 1) {
      res.ops_per_step = snap.engine.queued - queued_before;
      if (pol.kind == SyncPolicy::bounded) {
        res.bound_ops = uint64_t(pol.k) * std::max<uint64_t>(res.ops_per_step, 1);
        eng.set_max_inflight_ops(res.bound_ops);
      }
    }
    if (pol.kind == SyncPolicy::per_batch) r.loss = loss.item<double>();
    res.steps.push_back(r);
  }
  eng.wait_all();
  // RSS once the queued work has run but before its storages are reclaimed: pages of
  // buffers allocated at enqueue are only touched (resident) when the worker writes them.
  const size_t rss_after_sync = process_rss_bytes();
  res.final_loss = loss.item<double>();
  res.steps.back().loss = res.final_loss;
  res.total_s = seconds_since(t0);
  eng.reclaim();
  res.end_active = memory_snapshot().allocator.active_bytes;

  res.peak_rss = rss_after_sync;
  for (const StepRecord& r : res.steps) {
    res.peak_active = std::max(res.peak_active, r.allocator_active);
    res.peak_rss = std::max(res.peak_rss, r.rss);
    res.peak_queue_depth = std::max(res.peak_queue_depth, r.queue_depth);
    res.peak_inflight_bytes = std::max(res.peak_inflight_bytes, r.inflight_bytes);
  }
  return res;
}

size_t Trainer::measure_step_bytes() {
  Engine& eng = Engine::get();
  eng.wait_all();
  eng.reclaim();
  if (eng.synchronous()) return 0;  // a gate would run (and block) inline
  auto open = std::make_shared<std::atomic<bool>>(false);
  struct Opener {  // opens the gate and drains, also on error
    std::shared_ptr<std::atomic<bool>> g;
    ~Opener() {
      g->store(true);
      g->notify_all();
      Engine::get().synchronize();
    }
  } opener{open};
  eng.submit("trainer_gate", {}, {}, [g = open] { g->wait(false); },
             std::source_location::current());
  const size_t before = memory_snapshot().allocator.active_bytes;
  Tensor loss = step();
  const size_t after = memory_snapshot().allocator.active_bytes;
  (void)loss;
  return after > before ? after - before : 0;
}

}  // namespace tide::train
