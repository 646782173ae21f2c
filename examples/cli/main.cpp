// The `tide` command: dispatches to one subcommand per file (see commands.h). Options every
// subcommand accepts: --trace FILE (records the run with tide::profiler::Session and writes
// a Chrome trace) and --help. Exit codes: 0 success, 1 the run failed (an exception or a
// failed result check), 2 a bad command line.
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "examples/cli/commands.h"
#include "tide.h"

namespace tide::cli {

namespace {

constexpr const char* kRunsHelp =
    "  --runs N      repetitions of each measurement; the median is reported (default 3)\n";

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
     "  --n N         iterations (default 10000)\n"
     "  --runs N      repetitions of each measurement; the median is reported (default 5)\n",
     loop_main},
    {"mlp-memory",
     "the textbook MLP's memory under each sync policy (per_batch, none, bounded:K)",
     "[--policy per_batch|none|bounded:K|all] [--mode eager|traced|all] [--batches N] "
     "[--csv F] [--svg F]",
     "  --policy P    per_batch, none, bounded:K or all (default; bounded:2)\n"
     "  --mode M      eager (default), traced (the whole step captured and replayed) or all\n"
     "  --batches N   minibatches per policy (default 100)\n"
     "  --csv F       write every minibatch's record (one policy column)\n"
     "  --svg F       write memory and time-per-minibatch charts\n",
     mlp_memory_main},
    {"train",
     "train an MLP on Fashion-MNIST (784-256-128-10, Adam) and report test accuracy",
     "fashion-mnist [--epochs N] [--data DIR] [--save F] [--batch N] [--lr X] [--seed S]",
     "  --epochs N    training epochs (default 15)\n"
     "  --data DIR    directory of the IDX files (default /usr/share/datasets/fashion-mnist)\n"
     "  --save F      write the trained parameters as safetensors\n"
     "  --batch N     minibatch size (default 128)\n"
     "  --lr X        Adam learning rate (default 1e-3)\n"
     "  --seed S      seed of the initialisation and the shuffling (default 0)\n",
     train_fashion_main},
};

void print_usage(std::ostream& os) {
  os << "usage: tide <command> [options] [--trace FILE]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    name.resize(14, ' ');
    os << "  " << name << c.summary << "\n";
  }
  os << "\noptions for every command:\n"
        "  --trace FILE  record the run with the profiler and write a Chrome trace (JSON)\n"
        "  --help        show the command's options\n";
}

void print_command_usage(std::ostream& os, const Command& c) {
  os << "usage: tide " << c.name << " " << c.usage << " [--trace FILE]\n  " << c.summary << "\n"
     << c.options
     << "  --trace FILE  record the run with the profiler and write a Chrome trace (JSON)\n";
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace

std::string take_option_value(const Args& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value");
  return args[++i];
}

long long take_int_option(const Args& args, size_t& i, long long min_value) {
  const std::string opt = args[i];
  const std::string v = take_option_value(args, i);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < min_value)
    throw UsageError(opt + " needs an integer >= " + std::to_string(min_value) + ", got '" + v +
                     "'");
  return x;
}

int main(int argc, char** argv) {
  std::string command, trace;
  bool help = false;
  Args rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
    } else if (a == "--trace") {
      if (i + 1 >= argc) {
        std::cerr << "tide: --trace needs a file name\n";
        return 2;
      }
      trace = argv[++i];
    } else if (a.rfind("--trace=", 0) == 0) {
      trace = a.substr(8);
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
  try {
    profiler::Session session(trace);  // records nothing when trace is empty
    return cmd->run(rest);
  } catch (const UsageError& e) {
    std::cerr << "tide " << cmd->name << ": " << e.what() << "\n";
    print_command_usage(std::cerr, *cmd);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tide " << cmd->name << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace tide::cli

int main(int argc, char** argv) { return tide::cli::main(argc, argv); }
