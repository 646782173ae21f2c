// The Trainer: runs model + loss + optimizer over a data source for N minibatches under a
// sync policy (per_batch, none, bounded:K), recording per minibatch what the memory
// experiment watches. Policies, one minibatch and devices: docs/training.md.
// Not done here: eval passes, learning-rate schedules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/engine/engine.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "trace/function.h"
#include "train/data.h"
#include "train/grad_scaler.h"
#include "train/optimizer.h"

namespace tide::train {

enum class SyncPolicy { per_batch, none, bounded };

struct Policy {
  SyncPolicy kind = SyncPolicy::per_batch;
  int k = 0;  // bounded only: minibatches in flight, >= 1
  // "per_batch" | "none" | "bounded:K" (K >= 1). Throws "[trainer]" for anything else.
  static Policy parse(const std::string& s);
  static Policy per_batch() { return {SyncPolicy::per_batch, 0}; }
  static Policy none() { return {SyncPolicy::none, 0}; }
  static Policy bounded(int k) { return {SyncPolicy::bounded, k}; }
  // The string parse() accepts: "per_batch", "none", "bounded:2".
  std::string str() const;
};

// eager: every op of a step is queued on its own. traced: the whole step (forward, loss,
// backward, optimizer update) is captured once with trace::function and replayed as one
// engine task per minibatch; the first minibatch runs eagerly (it creates the optimizer's
// state and the gradients), the second traces.
enum class Mode { eager, traced };
// "eager" | "traced"; throws "[trainer]" for anything else.
Mode parse_mode(const std::string& s);
const char* name(Mode m);
// "enqueue" | "execution": the engine's Allocation setting, as the CSV writes it.
const char* alloc_name(Allocation a);

struct TrainerOptions {
  int batches = 100;  // minibatches to run, >= 1
  Policy policy;
  Mode mode = Mode::eager;
};

struct StepRecord {
  int batch = 0;                // 1-based
  double t_enqueue_s = 0;       // wall time since the run started, once the step was queued
  double loss = 0;              // NaN when the policy did not read it
  uint64_t queue_depth = 0;     // engine ops queued but not executed
  size_t inflight_bytes = 0;    // bytes held by queued, not yet reclaimed work
  size_t allocator_active = 0;  // allocator active bytes (absolute; see TrainResult baseline)
  size_t rss = 0;               // process RSS (absolute)
};

struct TrainResult {
  Policy policy;
  Mode mode = Mode::eager;
  Device device = Device::cpu();  // where the model lived (whose allocator was recorded)
  Allocation allocation = Allocation::at_enqueue;  // the engine's setting during the run
  std::vector<StepRecord> steps;
  double total_s = 0;             // wall time of the run including the final sync
  double final_loss = 0;          // the last minibatch's loss (always read)
  uint64_t ops_per_step = 0;      // EngineStats::queued delta of the first minibatch (traced:
                                  // of the second, the first replay)
  size_t baseline_active = 0;     // allocator active bytes before the first minibatch
  size_t baseline_rss = 0;        // RSS before the first minibatch
  size_t peak_active = 0;         // the allocator's peak during the run, up to the final sync
                                  // (absolute; allocated at execution, it comes while the
                                  // workers run rather than when a step is queued)
  size_t steady_peak_active = 0;  // the allocator's peak from the middle minibatch on (the
                                  // second half: past a traced run's warm-up and recording),
                                  // up to the final sync (absolute)
  size_t peak_rss = 0;            // max rss over the records and right after the final sync
  uint64_t peak_queue_depth = 0;
  size_t peak_inflight_bytes = 0;
  size_t end_active = 0;         // allocator active bytes after the final sync
  uint64_t bound_ops = 0;        // bounded only: the op bound used
  size_t trace_arena_bytes = 0;  // traced only: the planned arena, allocated once at the trace
                                 // (on a GPU with the graph's buffers and workspace)

  // Growth relative to the start (0 when memory went down).
  size_t increased_active() const {
    return peak_active > baseline_active ? peak_active - baseline_active : 0;
  }
  size_t increased_rss() const { return peak_rss > baseline_rss ? peak_rss - baseline_rss : 0; }
  // Minibatches of work in flight at the peak: peak_queue_depth / ops_per_step (traced:
  // counted from the first replay on, after the eager warm-up minibatch).
  double peak_steps_in_flight() const {
    return ops_per_step ? double(peak_queue_depth) / double(ops_per_step) : 0.0;
  }

  // Header line + one row per step: policy,batch,t_enqueue_s,loss,queue_depth,
  // inflight_bytes,allocator_active,active_delta,rss,rss_delta,mode,device,alloc
  // (device: "cpu", "cuda:0", ...; alloc: "enqueue" or "execution").
  // Throws "[trainer]" when the file cannot be written.
  void write_csv(const std::string& path) const;
  // The CSV text write_csv writes (without the header line when `header` is false).
  std::string csv(bool header = true) const;
};

// Writes several results into one CSV (one header; the policy column tells them apart).
// Throws "[trainer]" when the file cannot be written.
void write_csv(const std::string& path, const std::vector<TrainResult>& results);

using LossFn = std::function<Tensor(const Tensor& pred, const Tensor& y)>;

class Trainer {
 public:
  // Keeps references: model, optimizer and source must outlive the Trainer.
  Trainer(nn::Module& model, LossFn loss, Optimizer& optimizer, DataSource& source);

  // Runs options.batches minibatches under options.policy on the model's device (see the
  // top of this file). Waits for all previously queued work first (so the baseline is
  // clean) and for all of its own at the end. Throws "[trainer]" for batches < 1, a
  // bounded policy with k < 1, or traced mode with the model on a GPU (before running
  // anything); rethrows failures of the queued work (e.g. "[cross_entropy] label 200 ..."
  // on the CPU). Throws "[trainer] the loss of minibatch i of N is not finite ..." when a
  // loss it reads (every one under per_batch, the last otherwise) is NaN or infinite.
  // Resets the allocator's peak (TrainResult::peak_active is the run's). Runs under the
  // engine's Allocation setting as it is; an out-of-memory failure of an output allocated
  // at execution is rethrown like any failure of the queued work.
  TrainResult run(const TrainerOptions& options);

  // Queues one minibatch behind a gate that holds the worker back, measures the allocator
  // bytes it holds (active after queueing - before), then opens the gate and waits: the
  // bytes one queued minibatch holds. Trains one step (use a throwaway model to keep runs
  // comparable). Engine bounds and the allocator limit are lifted while it measures (they
  // would block the queueing behind the gate for ever) and restored after. Traced: two
  // steps run first (the eager warm-up and the trace), then one replay is measured. On a
  // GPU the gate holds the device's stream back and the GPU's allocator is measured.
  size_t measure_step_bytes(Mode mode = Mode::eager);
  // Trains one step and waits for it: the allocator's peak during the step over the active
  // bytes before it -- what a step needs while it runs. With outputs allocated at
  // execution a queued step holds almost nothing (measure_step_bytes), and this is what
  // running ahead costs on top of it. Resets the allocator's peak. Traced: as above.
  size_t measure_step_peak(Mode mode = Mode::eager);
  // The step's memory by role (trace/memory_plan.h), read from its recorded graph: one
  // eager step runs first (it makes the gradients and the optimizer's state the trace
  // captures), then the step is traced and planned on the next batch without running.
  // train::predict_eager_peak predicts an eager run's peak from it, before the run. Trains
  // one step and waits for it: use a throwaway model, as above.
  trace::MemoryPlan plan_step();

  // The device the model lives on now: its first parameter's (the CPU without parameters).
  Device device() const;

  // f runs after each minibatch's backward and before the optimizer step, on the calling
  // thread (inside the traced step in traced mode, so what it queues is recorded too):
  // the place for dist::DataParallel::reduce_gradients. An empty f (the default) does
  // nothing. Set it before the first traced run: a step already traced keeps what it saw.
  void set_after_backward(std::function<void()> f) { after_backward_ = std::move(f); }

  // Mixed precision (DESIGN §12): each step's forward and loss run under Autocast(low)
  // (ops/autocast.h); float16 also scales the loss with a GradScaler (train/grad_scaler.h),
  // whose skipped steps are device ops. nullopt (the default): float32 as the model is.
  // Throws "[autocast]" for a low dtype other than bfloat16 or float16. Set it before the
  // first traced run, as set_after_backward.
  void set_autocast(std::optional<DType> low);
  // The scaler of a float16 autocast, or nullptr.
  const GradScaler* grad_scaler() const { return scaler_.get(); }

  // The traced step's statistics (traces, replays, planned bytes); zeros before a traced
  // run.
  trace::FunctionStats traced_stats() const;

 private:
  Tensor step(Mode mode = Mode::eager);
  Batch next_batch();  // the source's next, starting a new epoch when it runs out
  Tensor compute(const Tensor& x, const Tensor& y);
  // Before a measurement: checks the mode, runs a traced mode's warm-up and trace (two
  // steps), waits for all work and reclaims it. Returns the model's device.
  Device settle(Mode mode);

  nn::Module& model_;
  LossFn loss_;
  Optimizer& opt_;
  DataSource& source_;
  uint64_t epoch_ = 0;
  // The traced step, made on the first traced run.
  std::function<Tensor(const Tensor&, const Tensor&)> traced_;
  std::function<trace::FunctionStats()> traced_stats_;
  std::function<void()> after_backward_;
  std::optional<DType> autocast_;
  std::unique_ptr<GradScaler> scaler_;
};

}  // namespace tide::train
