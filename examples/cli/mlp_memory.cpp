// `tide mlp-memory`: the textbook's memory experiment (d2l "Asynchronous Computation",
// "Improving the memory footprint"). The MLP Linear(512,2048)+ReLU, Linear(2048,512)+ReLU,
// Linear(512,1), L2 loss, SGD lr 0.005, batch 1024 of synthetic X ~ N(0,1), y = 1, trained
// under each sync policy: per_batch (item() every minibatch), none (sync only at the end)
// and bounded:K (engine backpressure, K minibatches in flight). For each it prints the
// textbook's lines, then a table comparing them and a prediction of the memory growth
// (bytes one queued minibatch holds x minibatches in flight) next to the measured one.
// --mode traced (or all) runs the same step captured once with trace::function and
// replayed per minibatch, so eager and traced time and memory sit in one table and chart.
// --alloc enqueue|execution|all: the engine's Allocation setting (outputs allocated when an
// op is queued, or when it runs on the worker, as MXNet does); `all` (the default) runs every
// policy under both, and the prediction adds, allocated at execution, what one running step
// needs (Trainer::measure_step_peak), since a queued step then holds almost nothing.
// Before any run, the eager step is recorded and planned (Trainer::plan_step), and each
// eager run's allocator peak is predicted from that plan alone (train/eager_prediction.h)
// and printed next to the measured one; `none` at enqueue is not predicted (its peak is
// how far the frontend runs ahead, a matter of timing). The traced runs' steady peaks (the
// second half of the minibatches) are predicted from the same plan.
// --device cuda[:N]: the model is moved to that GPU before its optimizer is built and the
// synthetic batches are created there; memory is then the GPU allocator's (the Trainer
// records the allocator of the model's device). Traced mode on a GPU replays each step as
// one CUDA graph.
//
// Under mpirun (`mpirun -np N tide mlp-memory`): every rank trains the same model on its
// own synthetic data with batch 1024 / N, and dist::DataParallel averages the gradients
// after each backward (queued on the communication stream, overlapping the rest of
// backward; inside the traced step in traced mode). Rank 0 prints what one process prints,
// for its own memory, and then a table with a line per rank and run: each rank's peak
// queued bytes and memory growth (gathered with one all-reduce per run).
//
// --model cnn: the same experiment on the CNN of `tide train --model cnn` (batch 128 of
// synthetic 28 x 28 images, the same L2 loss against y = 1).
//
// Progress: on a terminal (stderr), a bar per policy counts the minibatches the frontend has
// queued; it is driven from the data source (the Trainer calls next_batch once per
// minibatch on the calling thread) and reads no tensor, so it adds no sync. Under `none` it
// fills long before the work is done: the final sync happens after it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "examples/cli/commands.h"
#include "examples/cli/fashion_cnn.h"
#include "examples/cli/precision.h"
#include "examples/cli/report.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/eager_prediction.h"
#include "train/optimizer.h"
#include "train/plot.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace tide::cli {

namespace {

constexpr double kMB = 1024.0 * 1024.0;
constexpr uint64_t kModelSeed = 42;

// Passes batches through and counts them on `bar` (when set): the progress of the frontend.
class CountingSource : public train::DataSource {
 public:
  explicit CountingSource(train::DataSource& inner) : inner_(inner) {}
  int64_t size() const override { return inner_.size(); }
  int64_t batch_size() const override { return inner_.batch_size(); }
  void reset(uint64_t epoch) override { inner_.reset(epoch); }
  std::optional<train::Batch> next_batch() override {
    std::optional<train::Batch> b = inner_.next_batch();
    if (b && bar) bar->update(++count);
    return b;
  }
  train::ProgressBar* bar = nullptr;
  int64_t count = 0;

 private:
  train::DataSource& inner_;
};

// The Fashion-MNIST CNN's images from the synthetic source's flat rows.
class Images : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return x.reshape({x.size(0), 1, 28, 28}); }
  std::string name() const override { return "Images"; }
};

// The model of a run: the textbook MLP, or (--model cnn) the CNN of `tide train --model cnn`
// on synthetic 28 x 28 images with the same L2 loss against y = 1 (broadcast over its ten
// outputs): the memory experiment needs the step, not the data's meaning.
enum class Model { mlp, cnn };
int64_t batch_of(Model m) { return m == Model::mlp ? 1024 : 128; }

// The model, data, optimizer and trainer of one run, on `device` (the same weights and data
// on every device: the initialisation draws on the CPU and is copied, the data is Philox).
struct Experiment {
  Generator gen{kModelSeed};
  std::shared_ptr<nn::Sequential> net;
  train::SyntheticSource data;
  CountingSource source{data};
  std::unique_ptr<train::SGD> opt;
  std::unique_ptr<dist::DataParallel> dp;
  std::unique_ptr<train::Trainer> trainer;

  // group: under mpirun, each rank's data is its own (seeded by rank) and of batch
  // batch_of(model) / ranks, and the trainer averages the gradients over the group.
  Experiment(Device device, dist::ProcessGroup* group, std::optional<DType> autocast,
             Model model = Model::mlp)
      : data(train::SyntheticOptions()
                 .examples(batch_of(model) / (group ? group->size() : 1))
                 .features(model == Model::mlp ? 512 : 28 * 28)
                 .batch_size(batch_of(model) / (group ? group->size() : 1))
                 .seed(group ? uint64_t(group->rank()) : 0)
                 .device(device)) {
    if (model == Model::mlp) {
      net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(nn::LinearOptions(512, 2048), gen),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Linear>(nn::LinearOptions(2048, 512), gen),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Linear>(nn::LinearOptions(512, 1), gen)});
    } else {
      net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<Images>(), examples::fashion_cnn(28, 28, gen)});
    }
    net->to(device);  // before the optimizer, whose state is made where the parameters are
    opt = std::make_unique<train::SGD>(net->parameters(), train::SGDOptions(0.005));
    // The CNN's ten outputs against y (batch, 1), broadcast: l2_loss refuses the shapes.
    train::LossFn cnn_loss = [](const Tensor& pred, const Tensor& y) {
      const Tensor d = sub(pred, y);
      return mean(mul(mul(d, d), 0.5));
    };
    trainer = std::make_unique<train::Trainer>(
        *net, model == Model::mlp ? train::LossFn(nn::l2_loss) : cnn_loss, *opt, source);
    trainer->set_autocast(autocast);
    if (group) {
      dp = std::make_unique<dist::DataParallel>(*net, *group);
      trainer->set_after_backward([d = dp.get()] { d->reduce_gradients(); });
    }
  }
};

std::string mb(double bytes) { return format_fixed(bytes / kMB, 1); }

// Every rank's peak queued bytes, allocator growth and RSS growth for one run, gathered
// with one all-reduce (each rank fills its own slots of a zero tensor): rank r's figures
// at [r * kMemoryFigures, (r + 1) * kMemoryFigures). Waits.
constexpr size_t kMemoryFigures = 3;
std::vector<double> gather_memory(dist::ProcessGroup& group, const train::TrainResult& r) {
  std::vector<double> mine(size_t(group.size()) * kMemoryFigures, 0.0);
  double* slot = &mine[size_t(group.rank()) * kMemoryFigures];
  slot[0] = double(r.peak_inflight_bytes);
  slot[1] = double(r.increased_active());
  slot[2] = double(r.increased_rss());
  Tensor t = from_vector(mine, {int64_t(mine.size())});
  group.all_reduce(t);
  return t.to_vector<double>();
}

// The memory chart as one panel, or two when the series' highest values, from the top
// down, drop by 2x or more somewhere: the runs below the first such drop first, then those
// above it.
std::vector<train::Chart> split_growing(const train::Chart& mem,
                                        const std::vector<double>& highest) {
  std::vector<double> sorted = highest;
  std::sort(sorted.rbegin(), sorted.rend());
  double cut = 0;
  for (size_t i = 1; i < sorted.size() && cut == 0; ++i)
    if (sorted[i] > 0 && sorted[i - 1] >= 2 * sorted[i]) cut = sorted[i];
  train::Chart flat = mem, growing = mem;
  flat.series.clear();
  growing.series.clear();
  for (size_t i = 0; i < mem.series.size(); ++i)
    (cut > 0 && highest[i] > cut ? growing : flat).series.push_back(mem.series[i]);
  if (flat.series.empty() || growing.series.empty()) return {mem};
  growing.options.title += ": the runs that hold the most";
  return {flat, growing};
}

// (predicted / measured - 1) in percent, signed, one decimal: "+1.2 %", "-0.3 %".
std::string percent_error(double predicted, double measured) {
  const double e = measured > 0 ? std::round((predicted / measured - 1.0) * 1000.0) / 10.0 : 0.0;
  std::string text = format_fixed(e == 0.0 ? 0.0 : e, 1);  // never "-0.0"
  if (e >= 0) text.insert(0, "+");
  return text + " %";
}

// One row of a prediction table: the predicted and measured peaks and the error, or "not
// predicted" with its reason kept for the table's notes.
void prediction_row(Table& t, std::vector<std::string>& reasons, const train::TrainResult& r,
                    const train::PeakPrediction& p, double measured) {
  if (!p.predicted()) {
    t.row({r.policy.str(), train::alloc_name(r.allocation), "not predicted", mb(measured), "-"});
    reasons.push_back(r.policy.str() + " at " + train::alloc_name(r.allocation) +
                      ": not predicted: " + p.not_predicted);
    return;
  }
  t.row({r.policy.str(), train::alloc_name(r.allocation), mb(double(p.bytes)), mb(measured),
         percent_error(double(p.bytes), measured)});
}

// The traced runs' steady peaks (the second half: replays only) as predicted from the
// step's plan before they ran, next to the measured ones.
void print_traced_prediction(std::ostream& out, const trace::MemoryPlan& plan,
                             const std::vector<train::TrainResult>& results, const Device& device,
                             int batches) {
  Table t("traced steady peak: predicted from the plan before the run, and measured (" +
              device.str() + ")",
          {"policy", "alloc at", "predicted peak MB", "measured peak MB", "error"});
  std::vector<std::string> reasons;
  for (const train::TrainResult& r : results) {
    if (r.mode != train::Mode::traced) continue;
    prediction_row(t, reasons, r,
                   train::predict_traced_peak(plan, r.policy, r.allocation,
                                              Engine::get().synchronous(), batches),
                   double(r.steady_peak_active));
  }
  t.note(
      "measured: the allocator's peak over the second half of the minibatches (replays "
      "only). predicted (train::predict_traced_peak): the step's planned peak (parameters, "
      "gradients, state, the arena, one replay's batch and loss: MemoryPlan::peak); "
      "bounded:K with outputs allocated at enqueue adds K replays' batch and loss (K queued "
      "at the op bound, the next batch made). error = predicted / measured - 1");
  for (const std::string& why : reasons) t.note(why);
  t.print(out);
}

// The eager runs' peaks as predicted from the step's plan before they ran, next to the
// measured ones (the allocator's peak over the run, absolute).
void print_eager_prediction(std::ostream& out, const trace::MemoryPlan& plan,
                            const std::vector<train::TrainResult>& results, const Device& device,
                            int batches, bool data_parallel) {
  out << "\nThe eager step, recorded and planned before any run (trace/memory_plan.h): "
      << plan.str() << "\n  run eagerly it makes " << mb(double(plan.eager_step()))
      << " MB, of which " << mb(double(plan.step_after_outputs))
      << " MB is still needed after its loss; at most " << mb(double(plan.step_live_peak))
      << " MB is alive at once\n";
  Table t("eager peak: predicted from the plan before the run, and measured (" + device.str() + ")",
          {"policy", "alloc at", "predicted peak MB", "measured peak MB", "error"});
  std::vector<std::string> reasons;
  for (const train::TrainResult& r : results) {
    if (r.mode != train::Mode::eager) continue;
    train::PeakPrediction p = train::predict_eager_peak(plan, r.policy, r.allocation,
                                                        Engine::get().synchronous(), batches);
    // Measured 5-17 % over on 2 ranks: the plan runs one op at a time, and where the peak
    // is one running step or a window of ops, the all-reduce beside them adds its buffers.
    if (data_parallel && p.predicted() &&
        (r.allocation == Allocation::at_execution || r.policy.kind == train::SyncPolicy::bounded))
      p = {0,
           "data parallel: the gradients' all-reduce runs on the communication stream beside "
           "the step's ops, which the plan orders one at a time; " +
               mb(double(p.bytes)) + " MB is a lower bound"};
    prediction_row(t, reasons, r, p, double(r.peak_active));
  }
  t.note(
      "predicted: the parameters and the optimizer's state, plus, outputs allocated at "
      "enqueue, per_batch: one whole eager step and what the read step still needs after "
      "its loss (MemoryPlan::eager_peak_reading(0)); bounded:K: K whole steps and the most "
      "one step has alive at once (eager_peak_bounded(K)); allocated at execution, any "
      "policy: the most one step has alive at once (eager_peak_running). error = predicted / "
      "measured - 1");
  for (const std::string& why : reasons) t.note(why);
  if (!device.is_cpu())
    t.note(
        "measured on the CPU only so far (docs/memory.md); on a GPU an op's blocks come back "
        "when the GPU has run it, after the worker launched it");
  t.print(out);
}

}  // namespace

int mlp_memory_main(const Args& args, const GlobalOptions& global) {
  const Device device = global.device;
  std::string policy_arg = "all", mode_arg = "eager", alloc_arg = "all", csv, svg;
  long long batches = 100;
  std::optional<DType> autocast;  // --dtype bfloat16 / float16
  bool tf32 = false;
  Model model = Model::mlp;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--dtype") {
      autocast = take_dtype_option(args, i);
    } else if (a == "--model") {
      const std::string m = take_option_value(args, i);
      if (m != "mlp" && m != "cnn") throw UsageError("--model needs mlp or cnn, got '" + m + "'");
      model = m == "mlp" ? Model::mlp : Model::cnn;
    } else if (a == "--tf32") {
      tf32 = true;
    } else if (a == "--batches") {
      batches = take_int_option(args, i, 1, kMaxBatches);
    } else if (a == "--policy") {
      policy_arg = take_option_value(args, i);
    } else if (a == "--mode") {
      mode_arg = take_option_value(args, i);
    } else if (a == "--alloc") {
      alloc_arg = take_option_value(args, i);
    } else if (a == "--csv") {
      csv = take_output_option(args, i);
    } else if (a == "--svg") {
      svg = take_output_option(args, i);
    } else {
      throw UsageError("unknown option '" + a + "'");
    }
  }
  const Float32MatmulPrecisionGuard matmul_precision(matmul_precision_for(tf32));
  std::vector<train::Policy> policies;
  if (policy_arg == "all") {
    policies = {train::Policy::per_batch(), train::Policy::none(), train::Policy::bounded(2)};
  } else {
    try {
      policies = {train::Policy::parse(policy_arg)};
    } catch (const Error& e) {
      throw UsageError(std::string("--policy: ") + e.what());
    }
    if (policies[0].kind == train::SyncPolicy::bounded && policies[0].k > kMaxBatches)
      throw UsageError("--policy bounded:K must have K between 1 and " +
                       std::to_string(kMaxBatches) + ", got " + policy_arg);
  }

  std::vector<train::Mode> modes;
  if (mode_arg == "all") {
    modes = {train::Mode::eager, train::Mode::traced};
  } else {
    try {
      modes = {train::parse_mode(mode_arg)};
    } catch (const Error& e) {
      throw UsageError(std::string("--mode: ") + e.what());
    }
  }
  std::vector<Allocation> allocs;
  if (alloc_arg == "all") allocs = {Allocation::at_enqueue, Allocation::at_execution};
  else if (alloc_arg == "enqueue") allocs = {Allocation::at_enqueue};
  else if (alloc_arg == "execution") allocs = {Allocation::at_execution};
  else throw UsageError("--alloc must be enqueue, execution or all, got '" + alloc_arg + "'");

  // Under mpirun, the MPI world group (throws "[dist] tide was built without MPI" when this
  // build has none).
  dist::ProcessGroup* group = nullptr;
  if (!dist::launched_by_mpirun().empty()) group = &dist::mpi_world();
  const int ranks = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const int64_t batch = batch_of(model);
  if (batch % ranks != 0)
    throw UsageError("the batch of " + std::to_string(batch) +
                     " must split evenly over the ranks, got " + std::to_string(ranks) + " ranks");
  std::ostringstream silent;  // only rank 0 prints
  std::ostream& out = rank == 0 ? std::cout : silent;

  out << "tide mlp-memory: "
      << (model == Model::mlp ? "MLP 512-2048-512-1"
                              : "CNN (conv 32 + conv 64, batch norm, 3136-128-10) on 28x28 images")
      << ", L2 loss, SGD lr 0.005, batch " << batch << ", " << batches
      << " minibatches, device: " << device_label(device) << ", " << precision_label(autocast, tf32)
      << "\n";
  if (group)
    out << "data parallel: " << ranks << " ranks (" << group->backend() << "), batch "
        << batch / ranks << " per rank, gradients averaged after each backward; memory "
        << "figures are rank 0's, every rank's in the last table\n";
  out << "\n";

  // Bytes one queued minibatch holds, measured on a throwaway copy (one step queued behind a
  // gate that holds the worker back), per mode and allocation; allocated at execution, also
  // the peak of one running step (what the workers need on top of the queue).
  size_t step_bytes[2][2] = {}, step_peak[2][2] = {};
  for (train::Mode m : modes)
    for (Allocation a : allocs) {
      AllocationGuard scope(a);
      Experiment probe(device, group, autocast, model);
      step_bytes[int(m)][int(a)] = probe.trainer->measure_step_bytes(m);
      if (a == Allocation::at_execution)
        step_peak[int(m)][int(a)] = probe.trainer->measure_step_peak(m);
    }
  // The step's plan, from its recorded graph (one eager warm-up step first, on a throwaway
  // copy): the eager runs' peaks and the traced runs' steady peaks (not predicted under
  // mpirun) are predicted from it before they run.
  const bool has_eager = std::find(modes.begin(), modes.end(), train::Mode::eager) != modes.end();
  const bool has_traced = std::find(modes.begin(), modes.end(), train::Mode::traced) != modes.end();
  const bool predict_traced = has_traced && !group;
  std::optional<trace::MemoryPlan> plan;
  if (has_eager || predict_traced) {
    Experiment planner(device, group, autocast, model);
    plan = planner.trainer->plan_step();
  }
  const bool both = allocs.size() > 1;
  auto label = [](const train::TrainResult& r) {
    return r.policy.str() + (r.mode == train::Mode::traced ? " traced" : "");
  };
  // The charts' series: the tables have an "alloc at" column instead.
  auto series_label = [&](const train::TrainResult& r) {
    return label(r) + (both && r.allocation == Allocation::at_execution ? " @exec" : "");
  };

  const int n = int(batches);
  const int mid = std::max(1, n / 2);
  std::vector<train::TrainResult> results;
  std::vector<std::vector<double>> rank_memory;  // per run: gather_memory's figures
  for (train::Mode mode : modes)
    for (Allocation alloc : allocs)
      for (const train::Policy& p : policies) {
        AllocationGuard scope(alloc);
        // The same seeds: every run starts from the same weights and data.
        Experiment ex(device, group, autocast, model);
        train::TrainerOptions o;
        o.batches = n;
        o.policy = p;
        o.mode = mode;
        train::TrainResult r;
        {
          auto bar = rank == 0 ? std::make_unique<train::ProgressBar>(p.str() + " (queued)", n)
                               : std::make_unique<train::ProgressBar>(p.str(), n, silent, false);
          ex.source.bar = bar.get();
          r = ex.trainer->run(o);
          ex.source.bar = nullptr;
        }  // the bar ends its line before the results are printed
        out << "policy " << label(r) << ", outputs allocated at " << train::alloc_name(r.allocation)
            << ":\n";
        if (mid < n)
          out << "batch " << mid << ", time "
              << format_fixed(r.steps[size_t(mid - 1)].t_enqueue_s, 4) << " sec\n";
        out << "batch " << n << ", time " << format_fixed(r.steps.back().t_enqueue_s, 4)
            << " sec (queued; " << format_fixed(r.total_s, 4) << " sec after the final sync)\n";
        out << "increased memory: " << mb(double(r.increased_active())) << " MB (allocator), "
            << mb(double(r.increased_rss())) << " MB (RSS)\n";
        out << "final loss " << r.final_loss << "\n\n";
        if (group) rank_memory.push_back(gather_memory(*group, r));
        results.push_back(std::move(r));
      }

  Table t("mlp-memory: sync policies compared (" + std::to_string(n) + " minibatches on " +
              device.str() + ")",
          {"run", "alloc at", "total", "per batch", "peak queue (ops)", "steps in flight",
           "peak queued MB", "+alloc MB", "+RSS MB"});
  for (const train::TrainResult& r : results)
    t.row({label(r), train::alloc_name(r.allocation), format_seconds(r.total_s),
           format_seconds(r.total_s / n), std::to_string(r.peak_queue_depth),
           format_fixed(r.peak_steps_in_flight(), 1), mb(double(r.peak_inflight_bytes)),
           mb(double(r.increased_active())), mb(double(r.increased_rss()))});
  t.note("engine tasks per minibatch: " + std::to_string(results.front().ops_per_step) +
         (results.back().mode == train::Mode::traced
              ? " eager, " + std::to_string(results.back().ops_per_step) + " traced (one replay)"
              : std::string()) +
         "; MB = 2^20 bytes; +alloc/+RSS: peak growth over the value before the run (+alloc: "
         "the allocator's peak, up to the final sync); queued MB: bytes held by queued work "
         "(allocated at execution, outputs count only once allocated)" +
         (device.is_cpu() ? std::string()
                          : "; alloc = " + device.str() + "'s allocator (RSS: the host process)"));
  t.print(out);

  out << "\nPrediction: memory grows by (bytes one queued minibatch holds) x (minibatches "
         "in flight)\n"
         "  [+ what one running step needs, when outputs are allocated at execution].\n"
      << "  bytes one queued minibatch holds (one step queued behind a held-back "
         "worker): ";
  for (train::Mode m : modes)
    for (Allocation a : allocs)
      out << mb(double(step_bytes[int(m)][int(a)])) << " MB " << train::name(m) << " @"
          << train::alloc_name(a) << "  ";
  out << "\n";
  if (std::find(allocs.begin(), allocs.end(), Allocation::at_execution) != allocs.end()) {
    out << "  one running step's peak, allocated at execution: ";
    for (train::Mode m : modes)
      out << mb(double(step_peak[int(m)][int(Allocation::at_execution)])) << " MB "
          << train::name(m) << "  ";
    out << "\n";
  }
  Table pred("predicted vs measured growth (" + device.str() + ")",
             {"policy", "alloc at", "steps in flight", "predicted MB", "measured +alloc MB",
              "measured queued MB"});
  for (const train::TrainResult& r : results) {
    const int m = int(r.mode), a = int(r.allocation);
    pred.row({label(r), train::alloc_name(r.allocation), format_fixed(r.peak_steps_in_flight(), 1),
              mb(double(r.trace_arena_bytes) + double(step_bytes[m][a]) * r.peak_steps_in_flight() +
                 double(step_peak[m][a])),
              mb(double(r.increased_active())), mb(double(r.peak_inflight_bytes))});
  }
  pred.note(
      "steps in flight = peak queue depth / engine tasks per minibatch; per_batch keeps "
      "under two (item() waits for the forward pass only), bounded:K at most K, none as "
      "many as the frontend ran ahead. Traced: predicted = the arena (allocated once, at "
      "the trace) + bytes per queued replay x replays in flight; the measured growth also "
      "holds the gradients and the first minibatch, which runs eagerly as the warm-up. "
      "Allocated at execution, a queued step holds almost nothing, and the growth is one "
      "running step's peak plus what executed work holds until it is reclaimed");
  pred.print(out);

  if (has_eager) print_eager_prediction(out, *plan, results, device, n, group != nullptr);
  if (predict_traced) print_traced_prediction(out, *plan, results, device, n);

  if (group) {
    Table per_rank("memory per rank (" + std::to_string(ranks) + " ranks, " + device.str() + ")",
                   {"run", "alloc at", "rank", "peak queued MB", "+alloc MB", "+RSS MB"});
    for (size_t i = 0; i < results.size(); ++i)
      for (int r = 0; r < ranks; ++r) {
        const double* m = &rank_memory[i][size_t(r) * kMemoryFigures];
        per_rank.row({label(results[i]), train::alloc_name(results[i].allocation),
                      std::to_string(r), mb(m[0]), mb(m[1]), mb(m[2])});
      }
    per_rank.note(
        "each rank queues its own minibatches and holds its own copy of the model; "
        "the data-parallel buckets add a flat buffer per multi-parameter bucket to "
        "each step");
    per_rank.print(out);
  }

  if (rank != 0) return 0;  // rank 0 alone writes files
  if (!csv.empty()) {
    write_output("--csv", csv, [&](const std::string& tmp) { train::write_csv(tmp, results); });
    out << "\nwrote " << csv << "\n";
  }
  if (!svg.empty()) {
    const std::string on = device.is_cpu() ? std::string() : " (" + device.str() + ")";
    train::Chart mem{
        {"Memory held during training" + on, "minibatch", "allocator active - start (MB)"}, {}};
    train::Chart tim{{"Time per minibatch (frontend)", "minibatch", "time (ms)"}, {}};
    std::vector<double> highest;
    for (const train::TrainResult& r : results) {
      const std::string colour = train::palette_colour(highest.size());
      train::Series sm{series_label(r), {}, {}, colour}, st{series_label(r), {}, {}, colour};
      double prev = 0, top = 0;
      for (const train::StepRecord& s : r.steps) {
        sm.x.push_back(s.batch);
        sm.y.push_back((double(s.allocator_active) - double(r.baseline_active)) / kMB);
        top = std::max(top, sm.y.back());
        st.x.push_back(s.batch);
        st.y.push_back((s.t_enqueue_s - prev) * 1e3);
        prev = s.t_enqueue_s;
      }
      highest.push_back(top);
      mem.series.push_back(std::move(sm));
      tim.series.push_back(std::move(st));
    }
    // A run that grows with every queued minibatch (none, allocated at enqueue) would
    // squash the flat ones to the axis: such runs get a panel of their own.
    std::vector<train::Chart> charts = split_growing(mem, highest);
    charts.push_back(tim);
    write_output("--svg", svg, [&](const std::string& tmp) { train::write_svg(tmp, charts); });
    out << (csv.empty() ? "\n" : "") << "wrote " << svg << "\n";
  }
  return 0;
}

}  // namespace tide::cli
