// `tide gpt train` and `tide gpt sample`: a GPT (nn/gpt.h) trained on a text file and sampled.
//
// train: the corpus (default .data/text/shakespeare.txt, made by scripts/fetch_text_data.sh)
// is tokenized once (--preset char: one token per distinct byte; gpt2-124m: GPT-2's BPE from
// .data/text/gpt2), split 90/10, and sampled as random windows by text::TextLoader on a
// background thread. The step: forward, cross-entropy, backward, global-norm clipping at 1.0
// (fused into the update), the warmup + cosine schedule, AdamW (weight decay 0.1 on the 2-D
// weights only, betas (0.9, 0.99)); nothing in it reads the host, so --mode traced captures it
// once (trace::function) and replays it, schedule included, without retracing.
//
// Syncs follow --policy as in mlp-memory: per_batch reads each step's loss (the progress bar
// shows it), bounded:K reads the loss of the step K back (K steps in flight), none reads
// nothing until the validation passes and the end. ms_per_step: per_batch, the median of
// the second half's step times; otherwise the second half's wall time (ending with a sync)
// over its steps. A validation loss (the mean over --eval-batches batches) every
// --eval-every steps and at the end; then a sample of the model's text.
//
// --recompute runs each transformer block under checkpoint (ops/checkpoint.h): backward
// recomputes a block instead of keeping its activations, with the same losses and weights
// bit for bit; --recompute-keep-last recomputes all blocks but the last, whose activations
// backward needs as soon as the forward ends; --recompute-selective also keeps each block's
// MLP down-projection and attention output (GPTConfig::selective_recompute). The summary gives the
// allocator's peak over the whole run and over the second half (the steady state, past a traced
// step's warm-up and recording), and splits the latter into the training state (parameters,
// gradients, AdamW's two moments) and the rest, activations and temporaries; traced, also the
// plan's arena for intermediates.
//
// --save F writes the weights (safetensors, GPT-2's names) and F.json (the model's sizes and
// the tokenizer), which `tide gpt sample --load F` reads back.
// Under mpirun (`mpirun -np N tide gpt train`): data-parallel over the MPI world group. Each
// rank draws its own windows (seed + rank) with batch / N of them, dist::DataParallel
// averages the gradients after each backward (inside the traced step with --mode traced),
// and the losses printed are means over the ranks; rank 0 alone prints, samples and saves.
// Not done here: checkpoints during training, resuming.
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/memory_probe.h"
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "examples/cli/commands.h"
#include "examples/cli/precision.h"
#include "examples/cli/report.h"
#include "nn/nn.h"
#include "text/read_file.h"
#include "text/text.h"
#include "tide.h"
#include "train/grad_scaler.h"
#include "train/optimizer.h"
#include "train/plot.h"
#include "train/progress.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace tide::cli {

namespace {

constexpr double kMaxNorm = 1.0, kWeightDecay = 0.1;
constexpr const char* kDefaultData = ".data/text/shakespeare.txt";
constexpr const char* kDefaultVocab = ".data/text/gpt2";

// A number in [lo, hi] after option args[i]; advances i.
double take_number(const Args& args, size_t& i, double lo, double hi) {
  const std::string opt = args[i];
  const std::string v = take_option_value(args, i);
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !(x >= lo) || !(x <= hi))
    throw UsageError(opt + " needs a number in [" + format_fixed(lo, 4) + ", " +
                     format_fixed(hi, 0) + "], got '" + v + "'");
  return x;
}

struct TrainArgs {
  std::string preset = "char", mode = "eager", data = kDefaultData, vocab_dir = kDefaultVocab;
  std::string save, csv, svg, json;
  train::Policy policy = train::Policy::per_batch();
  int64_t steps = 2000, batch = 12, ctx = 0, eval_every = 250, eval_batches = 20, warmup = 100;
  int64_t seed = 0, sample_tokens = 200;
  double lr = 1e-3;
  bool recompute = false, keep_last = false, selective = false, plan_only = false;
  std::optional<DType> autocast;  // --dtype bfloat16 / float16
  bool tf32 = false;              // --tf32
  int64_t memory_budget_mb = 0;   // --memory-budget (traced): 0 none
};

TrainArgs parse_train(const Args& args) {
  TrainArgs a;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& o = args[i];
    if (o == "--preset") {
      a.preset = take_option_value(args, i);
      if (a.preset != "char" && a.preset != "gpt2-124m")
        throw UsageError("--preset needs char or gpt2-124m, got '" + a.preset + "'");
    } else if (o == "--mode") {
      a.mode = take_option_value(args, i);
      if (a.mode != "eager" && a.mode != "traced")
        throw UsageError("--mode needs eager or traced, got '" + a.mode + "'");
    } else if (o == "--policy") {
      const std::string p = take_option_value(args, i);
      try {
        a.policy = train::Policy::parse(p);
      } catch (const Error& e) {
        throw UsageError(std::string("--policy: ") + e.what());
      }
      if (a.policy.kind == train::SyncPolicy::bounded && a.policy.k > kMaxBatches)
        throw UsageError("--policy bounded:K needs K from 1 to " + std::to_string(kMaxBatches));
    } else if (o == "--steps") {
      a.steps = take_int_option(args, i, 1, 10'000'000);
    } else if (o == "--batch") {
      a.batch = take_int_option(args, i, 1, kMaxBatchSize);
    } else if (o == "--ctx") {
      a.ctx = take_int_option(args, i, 1, 1 << 16);
    } else if (o == "--lr") {
      a.lr = take_number(args, i, 1e-8, 10);
    } else if (o == "--warmup") {
      a.warmup = take_int_option(args, i, 0, 10'000'000);
    } else if (o == "--eval-every") {
      a.eval_every = take_int_option(args, i, 0, 10'000'000);
    } else if (o == "--eval-batches") {
      a.eval_batches = take_int_option(args, i, 1, 100'000);
    } else if (o == "--sample-tokens") {
      a.sample_tokens = take_int_option(args, i, 0, 100'000);
    } else if (o == "--seed") {
      a.seed = take_int_option(args, i, 0, kMaxSeed);
    } else if (o == "--data") {
      a.data = take_option_value(args, i);
    } else if (o == "--vocab") {
      a.vocab_dir = take_option_value(args, i);
    } else if (o == "--save") {
      a.save = take_output_option(args, i);
    } else if (o == "--csv") {
      a.csv = take_output_option(args, i);
    } else if (o == "--svg") {
      a.svg = take_output_option(args, i);
    } else if (o == "--json") {
      a.json = take_output_option(args, i);
    } else if (o == "--recompute") {
      a.recompute = true;
    } else if (o == "--recompute-keep-last") {
      a.recompute = a.keep_last = true;
    } else if (o == "--recompute-selective") {
      a.recompute = a.keep_last = a.selective = true;
    } else if (o == "--plan-only") {
      a.plan_only = true;
    } else if (o == "--dtype") {
      a.autocast = take_dtype_option(args, i);
    } else if (o == "--tf32") {
      a.tf32 = true;
    } else if (o == "--memory-budget") {
      a.memory_budget_mb = take_int_option(args, i, 1, 1 << 24);
    } else {
      throw UsageError("unknown option '" + o + "'");
    }
  }
  if (a.warmup > a.steps) a.warmup = a.steps;
  if (a.plan_only && a.mode != "traced") throw UsageError("--plan-only needs --mode traced");
  if (a.memory_budget_mb && a.mode != "traced")
    throw UsageError("--memory-budget needs --mode traced (eager: --recompute)");
  return a;
}

// The tokenizer a preset reads its text with: char from the corpus's bytes, gpt2 from files.
std::unique_ptr<text::Tokenizer> make_tokenizer(const std::string& kind, const std::string& corpus,
                                                const std::string& vocab_dir) {
  if (kind == "char")
    return std::make_unique<text::CharTokenizer>(text::CharTokenizer::from_corpus(corpus));
  return std::make_unique<text::BpeTokenizer>(text::BpeTokenizer::from_dir(vocab_dir));
}

// The model's sizes and tokenizer, saved beside the weights as F.json.
nlohmann::json describe(const nn::GPTConfig& c, const text::Tokenizer& tok) {
  nlohmann::json j = {
      {"format", "tide-gpt 1"}, {"vocab_size", c.vocab_size}, {"block_size", c.block_size},
      {"n_layer", c.n_layer},   {"n_head", c.n_head},         {"n_embd", c.n_embd},
      {"bias", c.bias},         {"tokenizer", tok.name()}};
  if (auto* ch = dynamic_cast<const text::CharTokenizer*>(&tok)) {
    std::vector<int> bytes;
    for (unsigned char b : ch->vocab()) bytes.push_back(b);
    j["char_vocab"] = bytes;
  }
  return j;
}

void write_text(const std::string& opt, const std::string& path, const std::string& body) {
  write_output(opt, path, [&](const std::string& tmp) {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << body;
    f.close();
    if (f.fail()) throw std::runtime_error("write failed");
  });
}

double mb(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

// The process's highest resident set so far (getrusage; Linux reports KiB).
size_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return size_t(u.ru_maxrss) * 1024;
}

// The allocator bytes of the training state: each parameter's block and its gradient's, and
// AdamW's two moments per parameter (blocks of the parameter's size; Adam keeps them private).
size_t training_state_bytes(const nn::Module& model) {
  size_t total = 0;
  for (const Tensor& p : model.parameters()) {
    total += 3 * p.storage()->bytes();
    if (Tensor g = p.grad(); g.defined()) total += g.storage()->bytes();
  }
  return total;
}

// The 0-d losses as one 1-D tensor (queued copies into its rows), for one all-reduce.
Tensor stack_losses(const std::vector<Tensor>& losses) {
  Tensor all = zeros({int64_t(losses.size())}, losses.front().dtype(), losses.front().device());
  for (size_t i = 0; i < losses.size(); ++i)
    all.slice(int64_t(i), int64_t(i) + 1).copy_(losses[i].reshape({1}));
  return all;
}

}  // namespace

int gpt_train(const Args& args, const GlobalOptions& global) {
  const TrainArgs a = parse_train(args);
  const Float32MatmulPrecisionGuard matmul_precision(matmul_precision_for(a.tf32));
  const Device device = global.device;
  // Under mpirun, the MPI world group (throws "[dist] tide was built without MPI" without it).
  dist::ProcessGroup* group = nullptr;
  if (!dist::launched_by_mpirun().empty()) group = &dist::mpi_world();
  const int ranks = group ? group->size() : 1, rank = group ? group->rank() : 0;
  if (a.batch % ranks != 0)
    throw UsageError("--batch " + std::to_string(a.batch) + " must be a multiple of the " +
                     std::to_string(ranks) + " ranks (each takes batch / ranks windows)");
  std::ostringstream silent;
  std::ostream& out = rank == 0 ? std::cout : silent;
  const std::string corpus_text = [&] {
    try {
      return text::read_file(a.data, "gpt");  // names the problem: missing, a directory, ...
    } catch (const Error& e) {
      throw std::runtime_error("--data " + a.data + ": cannot read the file: " + e.what() +
                               " (the default corpus is made by bash scripts/fetch_text_data.sh)");
    }
  }();
  auto tok = make_tokenizer(a.preset == "char" ? "char" : "gpt2", corpus_text, a.vocab_dir);
  auto corpus = std::make_shared<const text::TextCorpus>(
      text::TextCorpus::from_text(corpus_text, *tok, a.data));

  nn::GPTConfig cfg = a.preset == "char" ? nn::GPTConfig::char_model(tok->vocab_size())
                                         : nn::GPTConfig::gpt2_124m();
  if (a.ctx > cfg.block_size)
    throw UsageError("--ctx " + std::to_string(a.ctx) + " is longer than the " + a.preset +
                     " model's context of " + std::to_string(cfg.block_size) + " tokens");
  const int64_t ctx = a.ctx ? a.ctx : cfg.block_size;
  cfg.recompute = a.recompute;
  cfg.recompute_last_block = !a.keep_last;
  if (a.selective) cfg.selective_recompute();

  Generator gen{uint64_t(a.seed)};
  nn::GPT model(cfg, gen);
  model.to(device);  // before the optimizer, whose state is made where the parameters are
  train::AdamW opt(train::decay_groups(model, kWeightDecay),
                   train::AdamOptions(a.lr).betas(0.9, 0.99));
  std::unique_ptr<dist::DataParallel> ddp;
  if (group) ddp = std::make_unique<dist::DataParallel>(model, *group);
  train::WarmupCosine sched(
      opt, WarmupCosineOptions().lr(a.lr).min_lr(a.lr / 10).warmup(a.warmup).decay_steps(a.steps));
  auto make_loader = [&](text::Split s, uint64_t seed) {
    return std::make_unique<text::TextLoader>(
        corpus,
        text::TextLoaderOptions().batch_size(a.batch).block_size(ctx).seed(seed).split(s).device(
            device));
  };
  auto train_data = make_loader(text::Split::train, uint64_t(a.seed) + uint64_t(rank));

  out << "gpt: " << a.preset << " model, " << model.num_parameters() << " parameters ("
      << cfg.n_layer << " layers, " << cfg.n_head << " heads, width " << cfg.n_embd << "), context "
      << ctx << ", vocabulary " << cfg.vocab_size << " (" << tok->name() << ")\n"
      << "data: " << a.data << ", " << corpus->size() << " tokens (" << corpus->train_size()
      << " train, " << corpus->size() - corpus->train_size() << " validation)\n"
      << "train: " << a.steps << " steps of batch " << a.batch << ", AdamW lr " << a.lr
      << " (warmup " << a.warmup << ", cosine to " << a.lr / 10 << "), clip " << kMaxNorm << ", "
      << a.mode << ", policy " << a.policy.str() << ", device " << device_label(device) << ", "
      << precision_label(a.autocast, a.tf32)
      << (a.selective   ? ", blocks but the last recomputed in backward, keeping their MLP "
                          "down-projections and attention outputs"
          : a.keep_last ? ", blocks but the last recomputed in backward"
          : a.recompute ? ", blocks recomputed in backward"
                        : "")
      << "\n";
  if (a.recompute && a.mode == "eager" && !Engine::get().synchronous() &&
      Engine::get().allocation() == Allocation::at_enqueue)
    out << "note: with allocation at enqueue (the default) queued ops hold their storages until "
           "they have run, which keeps the step's activations whether autograd does or not; "
           "TIDE_ALLOC=execution or --mode traced lets --recompute lower the peak\n";
  if (group)
    out << "data parallel: " << ranks << " ranks (" << group->backend() << "), batch "
        << a.batch / ranks << " per rank, gradients averaged after each backward\n";

  std::unique_ptr<train::GradScaler> scaler = train::scaler_for(a.autocast, device);
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<Autocast> amp;
      if (a.autocast) amp.emplace(*a.autocast);
      loss = model.loss(x, y);
    }
    train::scaled_backward(loss, scaler.get());
    if (ddp) ddp->reduce_gradients();   // queued: the update waits for it by hazard tracking
    if (scaler) scaler->unscale_(opt);  // the clip sees the unscaled gradients
    opt.clip_grad_norm(kMaxNorm);
    sched.step();
    train::scaled_step(opt, scaler.get());  // skipped on the device after an overflow
    return loss.detach();
  };
  auto traced_step =
      trace::function(step, {.name = "gpt_step",
                             .warmup_calls = 1,
                             .memory_budget = size_t(a.memory_budget_mb) * 1024 * 1024});
  const bool traced = a.mode == "traced";

  auto val_loss = [&] {
    model.eval();
    auto val = make_loader(text::Split::val, 1);
    Tensor total = zeros(Shape{}, cfg.dtype, device);
    {
      NoGrad ng;
      std::optional<Autocast> amp;  // evaluated in the precision it trains in
      if (a.autocast) amp.emplace(*a.autocast);
      for (int64_t i = 0; i < a.eval_batches; ++i) {
        train::Batch b = val->next();
        total.add_(model.loss(b.x, b.y));
        total.wait_to_read();  // one batch at a time: 20 queued forwards would hold 20x the memory
      }
    }
    model.train();
    return total.item<double>() / double(a.eval_batches);
  };

  Allocator::get(device).reset_peak();
  std::vector<Tensor> losses;  // 0-d, one per step, read when the policy says (or at the end)
  losses.reserve(size_t(a.steps));
  std::vector<double> step_ms;
  std::vector<std::pair<int64_t, double>> vals;
  auto bar_ptr = rank == 0 ? std::make_unique<train::ProgressBar>("train", a.steps)
                           : std::make_unique<train::ProgressBar>("train", a.steps, silent, false);
  train::ProgressBar& bar = *bar_ptr;
  const size_t rss_start = process_rss_bytes();  // for the peers' RSS comparisons
  const auto t_start = Clock::now();
  auto t_half = t_start;
  double eval_s = 0;
  size_t run_peak = 0;  // the first half's peak, kept when the second half's starts
  // Traced: the step's memory by role as planned before its first replay (after the eager
  // warm-up step), compared at the end with the second half's measured peak.
  std::optional<trace::MemoryPlan> plan;
  for (int64_t s = 0; s < a.steps; ++s) {
    if (s == a.steps / 2) {
      if (a.policy.kind != train::SyncPolicy::per_batch) wait_all();
      t_half = Clock::now();
      run_peak = Allocator::get(device).stats().peak_bytes;
      Allocator::get(device).reset_peak();
    }
    const auto t0 = Clock::now();
    train::Batch b = train_data->next();
    if (traced && !plan && traced_step.stats().calls == 1) {
      // The warm-up step's backward may still be queued: let it finish first, so that the
      // recording reuses its freed blocks instead of adding to them.
      wait_all();
      plan = traced_step.memory_plan(b.x, b.y);
      std::cerr << (bar.enabled() ? "\n" : "");
      out << "planned step: " << plan->str() << std::endl;
      if (a.memory_budget_mb) out << traced_step.stats().remat.str() << std::endl;
      if (a.plan_only) return 0;
    }
    Tensor loss = traced ? traced_step(b.x, b.y) : step(b.x, b.y);
    losses.push_back(loss);
    float shown = NAN;
    if (a.policy.kind == train::SyncPolicy::per_batch) {
      shown = loss.item<float>();
    } else if (a.policy.kind == train::SyncPolicy::bounded && s >= a.policy.k) {
      shown = losses[size_t(s - a.policy.k)].item<float>();
    }
    step_ms.push_back(seconds_since(t0) * 1e3);
    if (memory::recording()) memory::mark("step " + std::to_string(s + 1));
    if (!std::isnan(shown)) {
      const double secs = seconds_since(t_start) - eval_s;
      bar.set_status("loss " + format_fixed(shown, 4) + "  " +
                     format_fixed(double((s + 1) * a.batch * ctx) / secs, 0) + " tok/s  " +
                     format_fixed(mb(Allocator::get(device).stats().active_bytes), 0) + " MB");
    }
    bar.update(s + 1);
    if (a.eval_every > 0 && (s + 1) % a.eval_every == 0 && s + 1 < a.steps) {
      const auto te = Clock::now();
      vals.emplace_back(s + 1, val_loss());
      eval_s += seconds_since(te);
      std::cerr << (bar.enabled() ? "\n" : "");
      out << "step " << s + 1 << ": val loss " << format_fixed(vals.back().second, 4) << std::endl;
    }
  }
  wait_all();
  const double train_s = seconds_since(t_start) - eval_s;
  const double half_s = seconds_since(t_half);
  bar.finish();
  const size_t steady_peak = Allocator::get(device).stats().peak_bytes;
  const size_t peak = std::max(run_peak, steady_peak);
  const size_t state = training_state_bytes(model);
  const size_t activations = steady_peak > state ? steady_peak - state : 0;
  vals.emplace_back(a.steps, val_loss());

  // Every step's loss in one read; under mpirun averaged over the ranks (one all-reduce).
  std::vector<double> loss_values;
  {
    NoGrad ng;
    Tensor all = cast(stack_losses(losses), DType::float64);
    if (group) group->all_reduce(all);
    for (double v : all.to_vector<double>()) loss_values.push_back(v / double(ranks));
  }
  const int64_t second_half = a.steps - a.steps / 2;
  double ms_per_step = 0;
  if (a.policy.kind == train::SyncPolicy::per_batch)
    ms_per_step = median(std::vector<double>(step_ms.begin() + a.steps / 2, step_ms.end()));
  else ms_per_step = half_s * 1e3 / double(second_half);
  double train_loss = 0;
  const size_t tail = std::min<size_t>(50, loss_values.size());
  for (size_t i = loss_values.size() - tail; i < loss_values.size(); ++i)
    train_loss += loss_values[i] / double(tail);
  const double tokens_per_s = double(a.batch * ctx) / (ms_per_step / 1e3);
  out << "done: " << a.steps << " steps in " << format_fixed(train_s, 1) << " s, "
      << format_fixed(ms_per_step, 2) << " ms/step, " << format_fixed(tokens_per_s, 0)
      << " tokens/s, train loss " << format_fixed(train_loss, 4) << ", val loss "
      << format_fixed(vals.back().second, 4) << ", peak " << format_fixed(mb(peak), 1) << " MB\n"
      << "memory: second-half peak " << format_fixed(mb(steady_peak), 1)
      << " MB = " << format_fixed(mb(state), 1) << " MB parameters, gradients and AdamW state + "
      << format_fixed(mb(activations), 1) << " MB activations and temporaries\n";
  if (traced) {
    const trace::FunctionStats st = traced_step.stats();
    out << "trace: " << st.traces << " trace(s), " << st.replays << " replays, " << st.kernels
        << " kernels per step, arena " << format_fixed(mb(st.arena_bytes), 1) << " MB\n";
    if (plan)
      out << "memory: planned peak of a replay " << format_fixed(mb(plan->peak()), 1)
          << " MB; measured second-half peak / planned "
          << format_fixed(double(steady_peak) / double(plan->peak()), 3) << "\n";
  }

  if (rank != 0) return 0;  // rank 0 alone samples and writes the outputs
  if (a.sample_tokens > 0) {
    Generator sample_gen{uint64_t(a.seed) + 1};
    const std::vector<int32_t> prompt = tok->encode("\n");
    auto ids = nn::generate(model, prompt.empty() ? std::vector<int32_t>{0} : prompt,
                            nn::SampleOptions().tokens(a.sample_tokens).top_k(0), sample_gen);
    std::cout << "sample:\n" << tok->decode(ids) << "\n";
  }

  if (!a.save.empty()) {
    write_output("--save", a.save, [&](const std::string& tmp) { nn::save(model, tmp); });
    write_text("--save", a.save + ".json", describe(cfg, *tok).dump(2) + "\n");
    std::cout << "saved the model to " << a.save << " and " << a.save << ".json\n";
  }
  if (!a.csv.empty()) {
    std::ostringstream c;
    c << "step,loss,ms,val_loss\n";
    size_t v = 0;
    for (int64_t s = 0; s < a.steps; ++s) {
      c << s + 1 << ',' << loss_values[size_t(s)] << ',' << step_ms[size_t(s)] << ',';
      if (v < vals.size() && vals[v].first == s + 1) c << vals[v++].second;
      c << '\n';
    }
    write_text("--csv", a.csv, c.str());
  }
  if (!a.svg.empty()) {
    train::Series tr{"train loss", {}, {}}, va{"validation loss", {}, {}};
    for (int64_t s = 0; s < a.steps; ++s) {
      tr.x.push_back(double(s + 1));
      tr.y.push_back(loss_values[size_t(s)]);
    }
    for (const auto& [s, l] : vals) {
      va.x.push_back(double(s));
      va.y.push_back(l);
    }
    train::Chart chart{{"tide gpt train: " + a.preset + ", " + a.mode, "step", "loss"}, {tr, va}};
    write_output("--svg", a.svg, [&](const std::string& tmp) { train::write_svg(tmp, {chart}); });
  }
  if (!a.json.empty()) {
    nlohmann::json j = {{"ms_per_step", ms_per_step},
                        {"tokens_per_s", tokens_per_s},
                        {"train_loss", train_loss},
                        {"val_loss", vals.back().second},
                        {"peak_mb", mb(peak)},
                        {"peak_bytes", peak},
                        {"rss_start_bytes", rss_start},
                        {"rss_peak_bytes", peak_rss_bytes()},
                        {"steady_peak_bytes", steady_peak},
                        {"state_bytes", state},
                        {"activation_peak_bytes", activations},
                        {"recompute", a.recompute},
                        {"dtype", a.autocast ? std::string(name(*a.autocast)) : "float32"},
                        {"matmul_precision", name(matmul_precision_for(a.tf32))},
                        {"memory_budget_mb", a.memory_budget_mb},
                        {"mode", a.mode},
                        {"device", device.str()},
                        {"steps", a.steps},
                        {"train_seconds", train_s},
                        {"policy", a.policy.str()},
                        {"preset", a.preset},
                        {"batch", a.batch},
                        {"ctx", ctx},
                        {"parameters", model.num_parameters()}};
    if (traced) j["trace_arena_bytes"] = traced_step.stats().arena_bytes;
    if (plan) j["planned_peak_bytes"] = plan->peak();
    if (a.recompute) j["recompute_last_block"] = !a.keep_last;
    if (a.recompute) j["recompute_selective"] = a.selective;
    write_text("--json", a.json, j.dump() + "\n");
  }
  return 0;
}

int gpt_sample(const Args& args, const GlobalOptions& global) {
  std::string load, prompt = "\n", vocab_dir = kDefaultVocab;
  int64_t tokens = 200, top_k = 0, seed = 0;
  double temperature = 1.0;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& o = args[i];
    if (o == "--load") load = take_option_value(args, i);
    else if (o == "--prompt") prompt = take_option_value(args, i);
    else if (o == "--tokens") tokens = take_int_option(args, i, 0, 100'000);
    else if (o == "--top-k") top_k = take_int_option(args, i, 0, 1'000'000);
    else if (o == "--seed") seed = take_int_option(args, i, 0, kMaxSeed);
    else if (o == "--temperature") temperature = take_number(args, i, 1e-6, 1000);
    else if (o == "--vocab") vocab_dir = take_option_value(args, i);
    else throw UsageError("unknown option '" + o + "'");
  }
  if (load.empty()) throw UsageError("--load F is required (a model saved by gpt train --save)");
  std::ifstream f(load + ".json");
  if (!f.good())
    throw std::runtime_error("--load " + load + ": cannot read " + load +
                             ".json (gpt train --save writes it beside the weights)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
    if (j.value("format", "") != "tide-gpt 1") throw std::runtime_error("not a tide-gpt file");
  } catch (const std::exception& e) {
    throw std::runtime_error("--load " + load + ".json: " + e.what());
  }
  nn::GPTConfig cfg;
  cfg.vocab_size = j.at("vocab_size");
  cfg.block_size = j.at("block_size");
  cfg.n_layer = j.at("n_layer");
  cfg.n_head = j.at("n_head");
  cfg.n_embd = j.at("n_embd");
  cfg.bias = j.at("bias");
  std::unique_ptr<text::Tokenizer> tok;
  if (j.at("tokenizer") == "char") {
    std::string vocab;
    for (int b : j.at("char_vocab")) vocab.push_back(char(b));
    tok = std::make_unique<text::CharTokenizer>(vocab);
  } else {
    tok = std::make_unique<text::BpeTokenizer>(text::BpeTokenizer::from_dir(vocab_dir));
  }
  nn::GPT model(cfg);
  nn::load(model, load);  // throws "[load] F: ..." for weights of another shape
  model.to(global.device);
  Generator gen{uint64_t(seed)};
  auto ids =
      nn::generate(model, tok->encode(prompt),
                   nn::SampleOptions().tokens(tokens).temperature(temperature).top_k(top_k), gen);
  std::cout << tok->decode(ids) << "\n";
  return 0;
}

int gpt_main(const Args& args, const GlobalOptions& global) {
  if (args.empty() || (args[0] != "train" && args[0] != "sample" && args[0] != "memory"))
    throw UsageError(args.empty() ? "which action? (train, sample or memory)"
                                  : "unknown action '" + args[0] + "' (train, sample or memory)");
  if (args[0] == "memory") return gpt_memory(args, global);
  return args[0] == "train" ? gpt_train(args, global) : gpt_sample(args, global);
}

}  // namespace tide::cli
