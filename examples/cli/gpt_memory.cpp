// `tide gpt memory`: the memory experiment on a transformer. For each context length and
// sync policy, a GPT (the character model's sizes: 4 layers, 4 heads, width 128, with a
// context as long as the longest asked) trains a few eager steps (AdamW, clip, the same
// step as `tide gpt train`), and the allocator's peak and the bytes held by queued work are
// measured after two warm-up steps. The prediction comes first, from the step's recorded
// graph alone (trace/memory_plan.h: its shapes and lifetimes, nothing run): the parameters
// and AdamW's moments plus, per step queued ahead of the worker, all the step makes (every
// intermediate, its gradients) and its batch, and the part of the read step still needed
// after its loss (MemoryPlan::eager_peak_reading).
// --dtype bfloat16 / float16 runs (and records) the step under autocast, as `tide gpt train
// --dtype` does (float16 with a GradScaler): the same table in that precision.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "examples/cli/commands.h"
#include "examples/cli/precision.h"
#include "examples/cli/report.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/grad_scaler.h"
#include "train/optimizer.h"
#include "train/plot.h"
#include "train/text_file.h"
#include "train/trainer.h"

namespace tide::cli {

namespace {

constexpr int64_t kVocab = 65;  // the character model's (the ids are random: memory only)
constexpr double kMaxNorm = 1.0;
constexpr int kWarmup = 2;  // steps before the peak is measured (AdamW's state is made)

struct MemoryArgs {
  std::vector<int64_t> contexts = {64, 128, 256, 512, 1024};
  std::vector<train::Policy> policies = {train::Policy::per_batch(), train::Policy::bounded(2)};
  int64_t batch = 8, steps = 8;
  std::string csv, svg;
  std::optional<DType> autocast;  // --dtype bfloat16 / float16
};

std::vector<int64_t> parse_contexts(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    Args one{"--contexts", item};
    size_t i = 0;
    out.push_back(take_int_option(one, i, 1, 1 << 14));
  }
  if (out.empty()) throw UsageError("--contexts needs a list such as 64,128,256");
  return out;
}

MemoryArgs parse_memory(const Args& args) {
  MemoryArgs a;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& o = args[i];
    if (o == "--contexts") {
      a.contexts = parse_contexts(take_option_value(args, i));
    } else if (o == "--policies") {
      a.policies.clear();
      std::stringstream in(take_option_value(args, i));
      std::string item;
      while (std::getline(in, item, ',')) {
        try {
          a.policies.push_back(train::Policy::parse(item));
        } catch (const Error& e) {
          throw UsageError(std::string("--policies: ") + e.what());
        }
        if (a.policies.back().kind == train::SyncPolicy::none)
          throw UsageError(
              "--policies: none grows with every step queued; use per_batch or "
              "bounded:K");
        if (a.policies.back().kind == train::SyncPolicy::bounded && a.policies.back().k > 16)
          throw UsageError("--policies: bounded:K needs K from 1 to 16");
      }
      if (a.policies.empty()) throw UsageError("--policies needs per_batch and/or bounded:K");
    } else if (o == "--batch") {
      a.batch = take_int_option(args, i, 1, 1024);
    } else if (o == "--steps") {
      a.steps = take_int_option(args, i, 1, 1000);
    } else if (o == "--dtype") {
      a.autocast = take_dtype_option(args, i);
    } else if (o == "--csv") {
      a.csv = take_output_option(args, i);
    } else if (o == "--svg") {
      a.svg = take_output_option(args, i);
    } else {
      throw UsageError("unknown option '" + o + "'");
    }
  }
  for (const train::Policy& p : a.policies)
    if (p.kind == train::SyncPolicy::bounded && a.steps < p.k + 4)
      throw UsageError("--steps " + std::to_string(a.steps) + " is too few for " + p.str() +
                       ": the measured steps reach their steady state after K + 2 steps "
                       "(use --steps " +
                       std::to_string(p.k + 4) + " or more)");
  return a;
}

// The model, its optimizer and the training step of `tide gpt train` (in its precision).
struct Run {
  Run(int64_t block, Device device, std::optional<DType> autocast) : gen(0), low(autocast) {
    nn::GPTConfig cfg = nn::GPTConfig::char_model(kVocab);
    cfg.block_size = block;
    model = std::make_unique<nn::GPT>(cfg, gen);
    model->to(device);
    opt = std::make_unique<train::AdamW>(train::decay_groups(*model, 0.1),
                                         train::AdamOptions(1e-3).betas(0.9, 0.99));
    scaler = train::scaler_for(low, device);
  }
  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss;
    {
      std::optional<Autocast> amp;
      if (low) amp.emplace(*low);
      loss = model->loss(x, y);
    }
    train::scaled_backward(loss, scaler.get());
    if (scaler) scaler->unscale_(*opt);
    opt->clip_grad_norm(kMaxNorm);
    train::scaled_step(*opt, scaler.get());
    return loss.detach();
  }
  Generator gen;
  std::optional<DType> low;
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<train::AdamW> opt;
  std::unique_ptr<train::GradScaler> scaler;
};

// Random token ids (B, T) and their targets: the memory does not depend on the text.
std::pair<Tensor, Tensor> batch_of(int64_t b, int64_t t, uint64_t seed, Device device) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, kVocab - 1);
  std::vector<double> x(size_t(b * t)), y(size_t(b * t));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = double(id(rng));
    y[i] = double(id(rng));
  }
  return {from_data(x, {b, t}, DType::int64).to(device),
          from_data(y, {b, t}, DType::int64).to(device)};
}

int lag_of(const train::Policy& p) { return p.kind == train::SyncPolicy::bounded ? p.k : 0; }

// Plans the step at context t: one eager warm-up call (it makes AdamW's state), then the
// traced step's graph, recorded and planned without running.
trace::MemoryPlan plan_at(int64_t block, int64_t b, int64_t t, Device device,
                          std::optional<DType> autocast) {
  Run r(block, device, autocast);
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return r.step(x, y); },
                           {.name = "gpt_memory_step", .warmup_calls = 1});
  auto [x, y] = batch_of(b, t, 1, device);
  f(x, y);
  trace::MemoryPlan plan = f.memory_plan(x, y);
  wait_all();
  return plan;
}

struct Measured {
  size_t peak = 0;    // the allocator's peak after the warm-up steps
  size_t queued = 0;  // the most bytes held by queued work, sampled after each step
};

// Trains `steps` eager steps after the warm-up under the policy's loss reads.
Measured measure_at(int64_t block, int64_t b, int64_t t, const train::Policy& policy, int64_t steps,
                    Device device, std::optional<DType> autocast) {
  Run r(block, device, autocast);
  Allocator& alloc = Allocator::get(device);
  std::vector<Tensor> losses;
  Measured m;
  const int lag = lag_of(policy);
  for (int64_t s = 0; s < kWarmup + steps; ++s) {
    if (s == kWarmup) {
      wait_all();
      losses.clear();
      alloc.empty_cache();
      alloc.reset_peak();
    }
    auto [x, y] = batch_of(b, t, uint64_t(s) + 1, device);
    losses.push_back(r.step(x, y));
    if (s >= kWarmup) m.queued = std::max(m.queued, Engine::get().inflight_bytes());
    const int64_t read = int64_t(losses.size()) - 1 - lag;
    if (read >= 0) losses[size_t(read)].item<float>();
  }
  wait_all();
  m.peak = alloc.stats().peak_bytes;
  return m;
}

double mb(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

}  // namespace

int gpt_memory(const Args& args, const GlobalOptions& global) {
  const MemoryArgs a = parse_memory(args);
  const Device device = global.device;
  const int64_t block = *std::max_element(a.contexts.begin(), a.contexts.end());
  std::cout << "gpt memory: the character model's sizes (4 layers, 4 heads, width 128, vocabulary "
            << kVocab << "), context up to " << block << ", batch " << a.batch << ", AdamW, "
            << kWarmup << " warm-up + " << a.steps << " eager steps per run, "
            << precision_label(a.autocast, false) << ", device " << device_label(device)
            << ", outputs allocated at " << train::alloc_name(Engine::get().allocation()) << "\n";
  if (Engine::get().allocation() == Allocation::at_execution)
    std::cout << "note: the prediction assumes outputs allocated at enqueue (the default): "
                 "allocated at execution, a queued step holds almost nothing\n";

  Table table("gpt memory: predicted (from the recorded step, before running) and measured",
              {"context", "policy", "peak MB predicted", "measured", "ratio", "queued MB predicted",
               "measured", "ratio", "step MB", "traced MB"});
  std::string csv =
      "context,policy,predicted_peak_bytes,measured_peak_bytes,predicted_queued_bytes,"
      "measured_queued_bytes,state_bytes,step_bytes,traced_bytes\n";
  std::vector<train::Series> predicted(a.policies.size()), measured(a.policies.size());
  for (size_t k = 0; k < a.policies.size(); ++k) {
    predicted[k].name = a.policies[k].str() + " predicted";
    measured[k].name = a.policies[k].str() + " measured";
  }
  for (int64_t t : a.contexts) {
    const trace::MemoryPlan plan = plan_at(block, a.batch, t, device, a.autocast);
    const size_t state = plan.parameters + plan.captured + plan.state + plan.constants;
    for (size_t k = 0; k < a.policies.size(); ++k) {
      const train::Policy& p = a.policies[k];
      const size_t want = plan.eager_peak_reading(lag_of(p));
      // At the peak whole steps are queued, and their ops read every parameter and write
      // every gradient and moment: the engine counts the training state as held by them too.
      const size_t want_queued = want;
      const Measured m = measure_at(block, a.batch, t, p, a.steps, device, a.autocast);
      auto ratio = [](size_t got, size_t w) {
        return format_fixed(w ? double(got) / double(w) : 0.0, 3);
      };
      table.row({std::to_string(t), p.str(), format_fixed(mb(want), 1), format_fixed(mb(m.peak), 1),
                 ratio(m.peak, want), format_fixed(mb(want_queued), 1),
                 format_fixed(mb(m.queued), 1), ratio(m.queued, want_queued),
                 format_fixed(mb(plan.eager_step()), 1), format_fixed(mb(plan.peak()), 1)});
      csv += std::to_string(t) + "," + p.str() + "," + std::to_string(want) + "," +
             std::to_string(m.peak) + "," + std::to_string(want_queued) + "," +
             std::to_string(m.queued) + "," + std::to_string(state) + "," +
             std::to_string(plan.eager_step()) + "," + std::to_string(plan.peak()) + "\n";
      predicted[k].x.push_back(double(t));
      predicted[k].y.push_back(mb(want));
      measured[k].x.push_back(double(t));
      measured[k].y.push_back(mb(m.peak));
    }
  }
  table.note(
      "predicted: the parameters and AdamW's moments plus, for a policy that reads each "
      "step's loss L steps after queueing it (per_batch 0, bounded:K K), L + 1 whole steps "
      "(step MB: every intermediate, unshared, the gradients the step makes anew and its "
      "batch) and the part of the read step still needed after its loss");
  table.note(
      "queued: the bytes of the storages queued ops reference (the engine's count, "
      "sampled after each step is queued); predicted as the peak, since the queued steps "
      "read every parameter and write every gradient and moment");
  table.note("measured peak: the allocator's, over the steps after the warm-up");
  table.note("traced MB: the same step traced (its planned peak, shared arena), for comparison");
  table.print(std::cout);
  if (!a.csv.empty())
    write_output("--csv", a.csv,
                 [&](const std::string& tmp) { train::write_text_file(tmp, csv, "gpt memory"); });
  if (!a.svg.empty()) {
    train::Chart chart{{"GPT step memory by context: predicted and measured peaks",
                        "context (tokens)", "peak (MB)"},
                       {}};
    for (size_t k = 0; k < a.policies.size(); ++k) {
      chart.series.push_back(predicted[k]);
      chart.series.push_back(measured[k]);
    }
    write_output("--svg", a.svg, [&](const std::string& tmp) { train::write_svg(tmp, {chart}); });
  }
  return 0;
}

}  // namespace tide::cli
