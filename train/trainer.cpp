// The Trainer and its sync policies (docs/training.md, The Trainer).
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
#include <string>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/memory_probe.h"
#include "core/memory_record.h"
#include "ops/autocast.h"

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
    "rss,rss_delta,mode,device,alloc\n";

// A loss that is not finite ends the run: recording NaN and going on would train the
// parameters into NaN and return as if it had worked. On a GPU this is also how an invalid
// label shows (cross_entropy's kernel makes its loss NaN; the CPU fails the loss instead).
void check_finite_loss(double loss, int batch, int batches) {
  if (std::isfinite(loss)) return;
  throw Error("trainer", "the loss of minibatch " + std::to_string(batch) + " of " +
                             std::to_string(batches) + " is not finite (" + fmt_double(loss) +
                             "): the run diverged or the data is invalid (e.g. a label "
                             "outside the model's classes); stopping");
}

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
  throw Error("trainer", "unknown sync policy '" + s + "' (expected per_batch, none or bounded:K)");
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
  const char* mode_name = train::name(mode);
  const std::string dev = device.str();
  for (const StepRecord& r : steps) {
    long long ad = (long long)r.allocator_active - (long long)baseline_active;
    long long rd = (long long)r.rss - (long long)baseline_rss;
    o << name << ',' << r.batch << ',' << fmt_double(r.t_enqueue_s) << ',' << fmt_double(r.loss)
      << ',' << r.queue_depth << ',' << r.inflight_bytes << ',' << r.allocator_active << ',' << ad
      << ',' << r.rss << ',' << rd << ',' << mode_name << ',' << dev << ','
      << alloc_name(allocation) << '\n';
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

Device Trainer::device() const {
  std::vector<Tensor> params = model_.parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

Mode parse_mode(const std::string& s) {
  if (s == "eager") return Mode::eager;
  if (s == "traced") return Mode::traced;
  throw Error("trainer", "unknown mode '" + s + "' (expected eager or traced)");
}

const char* name(Mode m) { return m == Mode::eager ? "eager" : "traced"; }

const char* alloc_name(Allocation a) {
  return a == Allocation::at_enqueue ? "enqueue" : "execution";
}

void Trainer::set_autocast(std::optional<DType> low) {
  if (low) Autocast check(*low);  // refuses a dtype that is not 16-bit
  autocast_ = low;
  scaler_ = scaler_for(low, device());
}

Tensor Trainer::compute(const Tensor& x, const Tensor& y) {
  opt_.zero_grad();
  Tensor loss;
  {
    std::optional<Autocast> amp;
    if (autocast_) amp.emplace(*autocast_);
    loss = loss_(model_(x), y);
  }
  scaled_backward(loss, scaler_.get());
  if (after_backward_) after_backward_();
  scaled_step(opt_, scaler_.get());
  return loss;
}

Batch Trainer::next_batch() {
  std::optional<Batch> b = source_.next_batch();
  if (!b) {
    source_.reset(++epoch_);
    b = source_.next_batch();
    if (!b) throw Error("trainer", "the data source yields no batches");
  }
  return std::move(*b);
}

Tensor Trainer::step(Mode mode) {
  const Batch b = next_batch();
  if (mode == Mode::eager) return compute(b.x, b.y);
  if (!traced_) {
    auto f = trace::function([this](const Tensor& x, const Tensor& y) { return compute(x, y); },
                             {.name = "train_step", .warmup_calls = 1});
    traced_ = f;
    traced_stats_ = [f] { return f.stats(); };
  }
  return traced_(b.x, b.y);
}

trace::FunctionStats Trainer::traced_stats() const {
  return traced_stats_ ? traced_stats_() : trace::FunctionStats{};
}

TrainResult Trainer::run(const TrainerOptions& options) {
  if (options.batches < 1)
    throw Error("trainer", "batches must be >= 1, got " + std::to_string(options.batches));
  const Policy pol = options.policy;
  if (pol.kind == SyncPolicy::bounded && pol.k < 1)
    throw Error("trainer", "bounded:K needs K >= 1, got " + std::to_string(pol.k));

  const Device dev = device();

  Engine& eng = Engine::get();
  eng.wait_all();
  eng.reclaim();

  TrainResult res;
  res.policy = pol;
  res.mode = options.mode;
  res.device = dev;
  res.allocation = eng.allocation();
  // The first minibatch of a traced run is eager (warm-up): size the bound on a replay.
  const int sizing_batch = options.mode == Mode::traced ? std::min(2, options.batches) : 1;
  res.steps.reserve(size_t(options.batches));
  MemorySnapshot base = memory_snapshot(dev);
  res.baseline_active = base.allocator.active_bytes;
  res.baseline_rss = base.rss_bytes;
  // Allocated at execution, the peak comes while the workers run, not when a step is
  // queued: the allocator's own peak sees it.
  Allocator& alloc = Allocator::get(dev);
  alloc.reset_peak();

  OpBoundGuard bound_guard;  // restores the previous bound (a no-op for other policies)
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto t0 = Clock::now();
  Tensor loss;
  // The second half starts with the middle minibatch (the first replays of a traced run of
  // four or more): the whole run's peak so far is kept, and the allocator's restarts there.
  const int steady_from = options.batches / 2 + 1;
  size_t first_half_peak = 0;
  for (int i = 1; i <= options.batches; ++i) {
    if (i == steady_from && i > 1) {
      first_half_peak = alloc.stats().peak_bytes;
      alloc.reset_peak();
    }
    const uint64_t queued_before = eng.stats().queued;
    loss = step(options.mode);
    MemorySnapshot snap = memory_snapshot(dev);
    StepRecord r;
    r.batch = i;
    r.t_enqueue_s = seconds_since(t0);
    r.loss = nan;
    r.queue_depth = snap.engine.queue_depth;
    r.inflight_bytes = snap.engine.inflight_bytes;
    r.allocator_active = snap.allocator.active_bytes;
    r.rss = snap.rss_bytes;
    if (i == sizing_batch) {
      res.ops_per_step = snap.engine.queued - queued_before;
      if (pol.kind == SyncPolicy::bounded) {
        res.bound_ops = uint64_t(pol.k) * std::max<uint64_t>(res.ops_per_step, 1);
        eng.set_max_inflight_ops(res.bound_ops);
      }
    }
    if (pol.kind == SyncPolicy::per_batch) {
      r.loss = loss.item<double>();
      check_finite_loss(r.loss, i, options.batches);
    }
    res.steps.push_back(r);
    if (memory::recording()) memory::mark("minibatch " + std::to_string(i));
  }
  eng.wait_all();
  res.steady_peak_active = alloc.stats().peak_bytes;
  res.peak_active = std::max(first_half_peak, res.steady_peak_active);
  // RSS once the queued work has run but before its storages are reclaimed: pages of
  // buffers allocated at enqueue are only touched (resident) when the worker writes them.
  const size_t rss_after_sync = process_rss_bytes();
  res.final_loss = loss.item<double>();
  // Without per-batch reads the last loss is the first one seen: a NaN earlier on has
  // reached the parameters, and so this one, by now.
  check_finite_loss(res.final_loss, options.batches, options.batches);
  res.steps.back().loss = res.final_loss;
  res.total_s = seconds_since(t0);
  eng.reclaim();
  res.end_active = memory_snapshot(dev).allocator.active_bytes;

  res.peak_rss = rss_after_sync;
  if (options.mode == Mode::traced) {
    const trace::FunctionStats s = traced_stats();
    res.trace_arena_bytes = s.arena_bytes + s.graph_bytes;
  }
  for (const StepRecord& r : res.steps) {
    res.peak_rss = std::max(res.peak_rss, r.rss);
    if (r.batch >= sizing_batch)
      res.peak_queue_depth = std::max(res.peak_queue_depth, r.queue_depth);
    res.peak_inflight_bytes = std::max(res.peak_inflight_bytes, r.inflight_bytes);
  }
  return res;
}

Device Trainer::settle(Mode mode) {
  const Device dev = device();
  Engine& eng = Engine::get();
  if (mode == Mode::traced)
    for (int i = 0; i < 2; ++i) step(mode);
  eng.wait_all();
  eng.reclaim();
  return dev;
}

size_t Trainer::measure_step_bytes(Mode mode) {
  const Device dev = settle(mode);
  Engine& eng = Engine::get();
  if (eng.synchronous()) return 0;  // a gate would run (and block) inline
  auto open = std::make_shared<std::atomic<bool>>(false);
  // With the worker held, a bound on queued ops/bytes or an allocator limit would block
  // this thread for ever: lift them while measuring.
  Allocator& alloc = Allocator::get(dev);
  struct Opener {  // opens the gate, drains and restores the bounds, also on error
    std::shared_ptr<std::atomic<bool>> g;
    Engine& eng;
    Allocator& alloc;
    uint64_t max_ops = eng.max_inflight_ops();
    size_t max_bytes = eng.max_inflight_bytes();
    size_t limit = alloc.stats().limit_bytes;
    ~Opener() {
      g->store(true);
      g->notify_all();
      eng.synchronize();
      eng.set_max_inflight_ops(max_ops);
      eng.set_max_inflight_bytes(max_bytes);
      alloc.set_limit(limit);
    }
  } opener{open, eng, alloc};
  eng.set_max_inflight_ops(0);
  eng.set_max_inflight_bytes(0);
  alloc.set_limit(0);
  // On a GPU the gate holds the stream's worker, so the step's kernels are not launched
  // (and its storages not released) until it opens.
  eng.submit(
      dev, "trainer_gate", {}, {}, [g = open] { g->wait(false); }, tide::SourceLocation::current());
  const size_t before = alloc.stats().active_bytes;
  Tensor loss = step(mode);
  const size_t after = alloc.stats().active_bytes;
  (void)loss;
  return after > before ? after - before : 0;
}

size_t Trainer::measure_step_peak(Mode mode) {
  const Device dev = settle(mode);
  Engine& eng = Engine::get();
  Allocator& alloc = Allocator::get(dev);
  const size_t before = alloc.stats().active_bytes;
  alloc.reset_peak();
  Tensor loss = step(mode);
  eng.wait_all();
  const size_t peak = alloc.stats().peak_bytes;
  (void)loss;
  return peak > before ? peak - before : 0;
}

trace::MemoryPlan Trainer::plan_step() {
  Engine& eng = Engine::get();
  auto f = trace::function([this](const Tensor& x, const Tensor& y) { return compute(x, y); },
                           {.name = "plan_step", .warmup_calls = 1});
  const Batch first = next_batch();
  (void)f(first.x, first.y);  // the eager warm-up: gradients and optimizer state
  const Batch b = next_batch();
  trace::MemoryPlan plan = f.memory_plan(b.x, b.y);
  eng.wait_all();
  return plan;
}

}  // namespace tide::train
