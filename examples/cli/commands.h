// The subcommands of the `tide` command. Each lives in its own file and is listed once in
// main.cpp's table; main strips the options every command shares (--trace FILE,
// --device D, --help), passes the rest as Args and the shared settings as GlobalOptions.
// Adding a command: a new file with a `*_main`, one line in the table, one source in
// examples/CMakeLists.txt.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device.h"

namespace tide::cli {

using Args = std::vector<std::string>;

// The settings every command shares, parsed and checked by main before the command runs.
struct GlobalOptions {
  // --device: where the experiment creates its tensors, moves its models and puts its data.
  // main has checked that this process can use it.
  Device device = Device::cpu();
};

struct Command {
  const char* name;
  const char* summary;  // one line for `tide --help`
  const char* usage;    // the options after the name, for `tide NAME --help`
  std::string options;  // one line per option with its bounds, for `tide NAME --help`
  int (*run)(const Args& args, const GlobalOptions& global);  // returns the exit code
};

// A bad command line. main prints it with the command's usage and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The text after option `opt` at args[i + 1]; advances i. Throws UsageError when missing.
std::string take_option_value(const Args& args, size_t& i);

// The bounds of the numeric options, stated in --help. Each is far above any useful run
// but keeps the counts in an int and the run (or its memory) finite: the loop's unrolled
// trace holds n recorded ops (~2.5 KB each), a minibatch of mlp-memory takes ~1 s.
constexpr int64_t kMaxRuns = 1'000'000;     // --runs
constexpr int64_t kMaxLoopN = 1'000'000;    // loop --n
constexpr int64_t kMaxBatches = 10'000;     // mlp-memory --batches and bounded:K
constexpr int64_t kMaxEpochs = 1'000;       // train --epochs
constexpr int64_t kMaxBatchSize = 1 << 20;  // train --batch
constexpr int64_t kMaxSeed = INT64_MAX;     // train --seed
constexpr double kMaxLr = 1e3;              // train --lr, which must also be > 0

// The integer after option args[i], which must be in [min_value, max_value]; advances i.
// The whole value must be a decimal integer (no spaces, no sign but '-'). Throws UsageError
// naming the option and the bounds when it is missing, not an integer or out of range.
int64_t take_int_option(const Args& args, size_t& i, int64_t min_value, int64_t max_value);

// An output file named by option args[i] (--csv, --svg, --save): takes the value, advances i
// and checks it with check_output, so that a bad path is reported before any work.
std::string take_output_option(const Args& args, size_t& i);

// Checks, before the run, that `path` (the value of option `opt`) can be written: an empty
// path is a UsageError; a path that names a directory, or in a directory that is missing
// or not writable, throws std::runtime_error naming the path and the reason (strerror).
// It creates and removes the temporary file write_output will use.
void check_output(const std::string& opt, const std::string& path);

// Writes `path` by calling write(tmp) with a temporary file in the same directory, then
// renaming it into place, so a failed write never leaves a partial file at `path`. Throws
// std::runtime_error naming the option, the path and the reason; removes the temporary.
void write_output(const std::string& opt, const std::string& path,
                  const std::function<void(const std::string& tmp)>& write);

// --device's value: "cpu", "cuda" (cuda:0) or "cuda:N". Throws UsageError naming --device
// for anything else. Does not check that the device exists.
Device parse_device(const std::string& s);

// The device for headings: "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)",
// "cuda:0 (fake GPU (TIDE_FAKE_GPUS))".
std::string device_label(Device d);

int demo_main(const Args& args, const GlobalOptions& global);
int bench_async_main(const Args& args, const GlobalOptions& global);
int mlp_memory_main(const Args& args, const GlobalOptions& global);
int train_fashion_main(const Args& args, const GlobalOptions& global);
int loop_main(const Args& args, const GlobalOptions& global);
int gpt_main(const Args& args, const GlobalOptions& global);
// `tide gpt memory` (gpt_memory.cpp), which gpt_main dispatches to.
int gpt_memory(const Args& args, const GlobalOptions& global);

}  // namespace tide::cli
