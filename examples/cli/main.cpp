// The `tide` command: dispatches to one subcommand per file (see commands.h). Options every
// subcommand accepts: --trace FILE (records the run with the profiler and writes a Chrome
// trace; the path is checked before the run, see output.cpp), --device D (cpu, cuda or
// cuda:N: where the experiment runs; checked before the command starts) and --help. Exit
// codes: 0 success, 1 the run failed (an exception, a failed result check, a GPU this
// process cannot use, or an output file that cannot be written), 2 a bad command line
// (including a numeric option out of its bounds, see commands.h).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>

#include "core/cuda/runtime.h"
#include "examples/cli/commands.h"
#include "examples/cli/precision.h"
#include "tide.h"
#include "train/memory_report.h"

namespace tide::cli {

namespace {

std::string num(int64_t x) { return std::to_string(x); }

const std::string kRunsHelp = "  --runs N      repetitions of each measurement, 1 to " +
                              num(kMaxRuns) + "; the median is reported (default 3)\n";

const Command kCommands[] = {
    {"demo", "the asynchronous-computation experiments S1-S3 at small sizes (a few seconds)",
     "[--runs N]", kRunsHelp, demo_main},
    {"bench-async",
     "the same experiments at the textbook's sizes (10 x randn 1000x1000 + matmul, ...)",
     "[--runs N]", kRunsHelp, bench_async_main},
    {"loop",
     "the textbook's n x (y = x + 1): eager with a sync per op / at the end, traced, loop "
     "node, fused",
     "[--n N] [--runs N]",
     "  --n N         iterations, 1 to " + num(kMaxLoopN) +
         " (default 10000)\n"
         "  --runs N      repetitions of each measurement, 1 to " +
         num(kMaxRuns) + "; the median is reported (default 5)\n",
     loop_main},
    {"mlp-memory", "the textbook MLP's memory under each sync policy (per_batch, none, bounded:K)",
     "[--policy per_batch|none|bounded:K|all] [--mode eager|traced|all] "
     "[--alloc enqueue|execution|all] [--batches N] [--model mlp|cnn] [--csv F] [--svg F] "
     "[--dtype float32|bfloat16|float16] [--tf32]",
     "  --policy P    per_batch, none, bounded:K (K = 1 to " + num(kMaxBatches) +
         ") or all (default; bounded:2)\n"
         "  --mode M      eager (default), traced (the whole step captured and replayed) or all\n"
         "  --alloc A     when outputs are allocated: enqueue (when an op is queued), execution\n"
         "                (when it runs, on the worker) or all (default: both, side by side)\n"
         "  --batches N   minibatches per policy, 1 to " +
         num(kMaxBatches) +
         " (default 100; under none\n"
         "                memory grows with every minibatch queued)\n"
         "  --model M     mlp (default) or cnn (train's CNN, batch 128 of synthetic 28x28 images)\n"
         "  --csv F       write every minibatch's record (one policy column)\n"
         "  --svg F       write memory and time-per-minibatch charts\n" +
         std::string(kDtypeHelp),
     mlp_memory_main},
    {"train", "train an MLP or a CNN on Fashion-MNIST (Adam) and report test accuracy",
     "fashion-mnist [--model mlp|cnn] [--mode eager|traced] [--epochs N] [--data DIR] "
     "[--save F] [--batch N] [--lr X] [--seed S] [--plan-only] "
     "[--dtype float32|bfloat16|float16] [--tf32]",
     "  --model M     mlp (default: 784-256-128-10, ReLU) or cnn (two conv 3x3 / batch norm /\n"
     "                ReLU / max-pool blocks of 32 and 64 channels, then 3136-128-10)\n"
     "  --mode M      eager (default) or traced (the training step and the test forward\n"
     "                captured once with trace::function and replayed)\n"
     "  --epochs N    training epochs, 1 to " +
         num(kMaxEpochs) +
         " (default 15)\n"
         "  --data DIR    directory of the IDX files (default /usr/share/datasets/fashion-mnist)\n"
         "  --save F      write the trained parameters as safetensors\n"
         "  --batch N     minibatch size, 1 to " +
         num(kMaxBatchSize) +
         " (default 128)\n"
         "  --lr X        Adam learning rate, > 0 and <= " +
         num(int64_t(kMaxLr)) +
         " (default 1e-3)\n"
         "  --seed S      seed of the initialisation and the shuffling, 0 to " +
         num(kMaxSeed) +
         " (default 0)\n"
         "  --plan-only   with --mode traced: after the eager warm-up step, print the traced\n"
         "                step's memory by role as planned before it runs, and stop\n" +
         std::string(kDtypeHelp),
     train_fashion_main},
    {"gpt", "train a GPT on a text file (eager or traced) and sample from it",
     "train [--preset char|gpt2-124m] [--mode eager|traced] [--steps N] [--batch B] [--ctx T] "
     "[--policy per_batch|none|bounded:K] [--lr X] [--data FILE] [--save F] [--csv F] [--svg F] "
     "[--json F] [--recompute] [--recompute-keep-last] [--recompute-selective] [--plan-only] "
     "[--dtype float32|bfloat16|float16] [--tf32] [--memory-budget MB] | sample --load F [--prompt "
     "S] [--tokens N] "
     "[--temperature X] "
     "[--top-k K] | memory [--contexts 64,128,...] [--policies per_batch,bounded:K] [--batch B] "
     "[--steps N] [--dtype float32|bfloat16|float16] [--csv F] [--svg F]",
     "  train:\n"
     "  --preset P    char (default: 4 layers, 4 heads, width 128, context 64, a byte\n"
     "                vocabulary from the corpus) or gpt2-124m (GPT-2 124M, its BPE)\n"
     "  --mode M      eager (default) or traced (the whole step captured and replayed)\n"
     "  --steps N     training steps (default 2000)\n"
     "  --batch B     windows per step (default 12)\n"
     "  --ctx T       tokens per window, at most the model's context (default: the context)\n"
     "  --policy P    per_batch (default: read each loss), none or bounded:K\n"
     "  --lr X        AdamW's peak learning rate (default 1e-3; warmup, then cosine to X/10)\n"
     "  --warmup N    warmup steps (default 100)\n"
     "  --eval-every N  validation loss every N steps (default 250; 0: only at the end)\n"
     "  --eval-batches N  validation batches per evaluation (default 20)\n"
     "  --recompute   recompute each block in backward instead of keeping its\n"
     "                activations (less memory, the same results bit for bit)\n"
     "  --recompute-keep-last  the same for every block but the last\n"
     "  --recompute-selective  every block but the last, each keeping its MLP's\n"
     "                down-projection and attention outputs (a cheaper recompute)\n"
     "  --memory-budget MB  with --mode traced: the planner recomputes cheap elementwise\n"
     "                activations until the step's planned peak fits in MB (same results)\n"
     "  --plan-only   with --mode traced: after the eager warm-up step, print the traced\n"
     "                step's memory by role as planned before it runs, and stop\n" +
         std::string(kDtypeHelp) +
         "  --data FILE   UTF-8 text (default .data/text/shakespeare.txt:\n"
         "                bash scripts/fetch_text_data.sh)\n"
         "  --vocab DIR   GPT-2's encoder.json and vocab.bpe (default .data/text/gpt2)\n"
         "  --save F      write the weights (safetensors) and F.json (sizes, tokenizer)\n"
         "  --csv F, --svg F, --json F  per-step losses and times; the loss chart; a summary\n"
         "  --seed S, --sample-tokens N  (defaults 0, 200)\n"
         "  sample:\n"
         "  --load F      a model written by train --save\n"
         "  --prompt S    the text to continue (default a newline)\n"
         "  --tokens N, --temperature X, --top-k K, --seed S  (defaults 200, 1.0, 0 = all, 0)\n"
         "  memory (the step's memory by context and sync policy, predicted and measured):\n"
         "  --contexts L  context lengths (default 64,128,256,512,1024)\n"
         "  --policies P  per_batch and/or bounded:K, K up to 16 (default per_batch,bounded:2)\n"
         "  --batch B, --steps N  windows per step; measured steps after 2 warm-up, at least\n"
         "                K + 4 (defaults 8, 8)\n"
         "  --dtype D     the step under autocast, as train's --dtype (float32 default)\n"
         "  --csv F, --svg F  every row; the peaks by context\n",
     gpt_main},
};

constexpr const char* kGlobalHelp =
    "  --device D    run on D: cpu (default), cuda (= cuda:0) or cuda:N; the experiment's\n"
    "                tensors, model and data are created there\n"
    "  --trace FILE  record the run with the profiler and write a Chrome trace (JSON)\n"
    "  --memory-report FILE  record every allocation of the run (role, op, source line)\n"
    "                and write the memory report: FILE.html a self-contained page with the\n"
    "                timeline by role, the peak and its sites; FILE.svg the timeline alone\n"
    "                (every output file: its directory must exist and be writable; checked\n"
    "                before the run, written through a temporary file renamed into place)\n";

void print_usage(std::ostream& os) {
  os << "usage: tide <command> [options] [--device D] [--trace FILE]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    name.resize(14, ' ');
    os << "  " << name << c.summary << "\n";
  }
  os << "\noptions for every command:\n"
     << kGlobalHelp << "  --help        show the command's options\n";
}

void print_command_usage(std::ostream& os, const Command& c) {
  os << "usage: tide " << c.name << " " << c.usage << " [--device D] [--trace FILE]\n  "
     << c.summary << "\n"
     << c.options << kGlobalHelp;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

// Throws tide::Error saying why when this process cannot use d (the runtime explains: no
// CUDA in this build, no such GPU, the driver's error); starts the GPU's runtime otherwise.
void check_usable(Device d) {
  if (d.is_cpu()) return;
  if (!cuda::available(d.index)) {
    cuda::DeviceRuntime::get(d.index, "device");  // throws the reason
    throw Error("device", "cannot use " + d.str() + ": this process has no such GPU");
  }
  cuda::DeviceRuntime::get(d.index, "device");
}

}  // namespace

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  const std::string pre = "cuda:";
  if (s.rfind(pre, 0) == 0) {
    const std::string n = s.substr(pre.size());
    if (!n.empty() && n.size() <= 6 &&
        std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Device::cuda(std::stoi(n));
  }
  throw UsageError("--device needs cpu, cuda or cuda:N (N = 0, 1, ...), got '" + s + "'");
}

std::string device_label(Device d) {
  if (d.is_cpu()) return "cpu";
  std::string name = cuda::DeviceRuntime::get(d.index, "device").api().name();
  const std::string suffix = " (" + d.str() + ")";  // the real device's name ends with it
  if (name.size() > suffix.size() && name.ends_with(suffix))
    name.resize(name.size() - suffix.size());
  return d.str() + " (" + name + ")";
}

std::string take_option_value(const Args& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value");
  return args[++i];
}

int64_t take_int_option(const Args& args, size_t& i, int64_t min_value, int64_t max_value) {
  const std::string opt = args[i];
  const std::string v = take_option_value(args, i);
  const std::string bounds = std::to_string(min_value) + " and " + std::to_string(max_value);
  // from_chars, unlike strtoll, skips no spaces and takes no '+'; the whole value must parse.
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  const bool integer = !v.empty() && end == v.data() + v.size() &&
                       (ec == std::errc() || ec == std::errc::result_out_of_range);
  if (!integer) throw UsageError(opt + " needs an integer between " + bounds + ", got '" + v + "'");
  if (ec == std::errc::result_out_of_range || x < min_value || x > max_value)
    throw UsageError(opt + " must be between " + bounds + ", got " + v);
  return x;
}

int main(int argc, char** argv) {
  std::string command, trace, device_arg, memory_report, command_line = "tide";
  bool help = false, device_given = false, trace_given = false;
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  Args rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
    } else if (a == "--device") {
      if (i + 1 >= argc) {
        std::cerr << "tide: --device needs a value (cpu, cuda or cuda:N)\n";
        return 2;
      }
      device_arg = argv[++i];
      device_given = true;
    } else if (a.rfind("--device=", 0) == 0) {
      device_arg = a.substr(9);
      device_given = true;
    } else if (a == "--trace") {
      if (i + 1 >= argc) {
        std::cerr << "tide: --trace needs a file name\n";
        return 2;
      }
      trace = argv[++i];
      trace_given = true;
    } else if (a.rfind("--trace=", 0) == 0) {
      trace = a.substr(8);
      trace_given = true;
    } else if (a == "--memory-report") {
      if (i + 1 >= argc) {
        std::cerr << "tide: --memory-report needs a file name (.html or .svg)\n";
        return 2;
      }
      memory_report = argv[++i];
    } else if (a.rfind("--memory-report=", 0) == 0) {
      memory_report = a.substr(16);
    } else if (command.empty() && !a.empty() && a[0] != '-') {
      command = a;
    } else {
      rest.push_back(a);
    }
  }
  if (command.empty()) {
    if (help) {
      print_usage(std::cout);
      return 0;
    }
    std::cerr << "tide: no command given\n\n";
    print_usage(std::cerr);
    return 2;
  }
  const Command* cmd = find_command(command);
  if (!cmd) {
    std::cerr << "tide: unknown command '" << command << "'\n\n";
    print_usage(std::cerr);
    return 2;
  }
  if (help) {
    print_command_usage(std::cout, *cmd);
    return 0;
  }
  GlobalOptions global;
  try {
    if (device_given) global.device = parse_device(device_arg);
    if (trace_given) check_output("--trace", trace);  // before the run, not after it
    if (!memory_report.empty()) check_output("--memory-report", memory_report);
  } catch (const UsageError& e) {
    std::cerr << "tide " << cmd->name << ": " << e.what() << "\n";
    print_command_usage(std::cerr, *cmd);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tide " << cmd->name << ": error: " << e.what() << "\n";
    return 1;
  }
  try {
    check_usable(global.device);  // before any work: one line saying why, exit 1
  } catch (const std::exception& e) {
    std::cerr << "tide " << cmd->name << ": error: --device " << device_arg << ": " << e.what()
              << "\n";
    return 1;
  }
  if (trace_given) profiler::start();
  if (!memory_report.empty()) memory::start();
  int rc = 0;
  try {
    rc = cmd->run(rest, global);
  } catch (const UsageError& e) {
    std::cerr << "tide " << cmd->name << ": " << e.what() << "\n";
    print_command_usage(std::cerr, *cmd);
    return 2;  // nothing ran: no trace to write
  } catch (const std::exception& e) {
    std::cerr << "tide " << cmd->name << ": error: " << e.what() << "\n";
    rc = 1;
  }
  if (trace_given) {
    // Also after a failed run: its trace shows what ran. A trace that cannot be written
    // fails the command.
    profiler::stop();
    try {
      write_output("--trace", trace,
                   [](const std::string& tmp) { profiler::write_chrome_trace(tmp); });
      std::cerr << "trace written to " << trace << "\n";
    } catch (const std::exception& e) {
      std::cerr << "tide " << cmd->name << ": error: " << e.what() << "\n";
      if (rc == 0) rc = 1;
    }
  }
  if (!memory_report.empty()) {
    // Also after a failed run, as the trace. Written once the queued work has run.
    try {
      wait_all();
      memory::stop();
      const memory::Snapshot snap = memory::snapshot();
      train::MemoryReportOptions ro;
      ro.title = "tide " + std::string(cmd->name) + ": memory";
      ro.command = command_line;
      ro.device = global.device;
      ro.format = memory_report.ends_with(".svg") ? train::MemoryReportOptions::Format::svg
                                                  : train::MemoryReportOptions::Format::html;
      write_output("--memory-report", memory_report,
                   [&](const std::string& tmp) { train::write_memory_report(tmp, snap, ro); });
      std::cerr << "memory report written to " << memory_report << "\n";
    } catch (const std::exception& e) {
      std::cerr << "tide " << cmd->name << ": error: " << e.what() << "\n";
      if (rc == 0) rc = 1;
    }
  }
  return rc;
}

}  // namespace tide::cli

int main(int argc, char** argv) { return tide::cli::main(argc, argv); }
