// The subcommands of the `tide` command. Each lives in its own file and is listed once in
// main.cpp's table; main strips the options every command shares (--trace FILE,
// --device D, --help), passes the rest as Args and the shared settings as GlobalOptions.
// Adding a command: a new file with a `*_main`, one line in the table, one source in
// examples/CMakeLists.txt.
#pragma once

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
  const char* options;  // one line per option, for `tide NAME --help`
  int (*run)(const Args& args, const GlobalOptions& global);  // returns the exit code
};

// A bad command line. main prints it with the command's usage and exits with 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The text after option `opt` at args[i + 1]; advances i. Throws UsageError when missing.
std::string take_option_value(const Args& args, size_t& i);

// The integer after option `opt` at args[i + 1], which must be >= min_value; advances i.
// Throws UsageError when it is missing or not an integer in range.
long long take_int_option(const Args& args, size_t& i, long long min_value);

// --device's value: "cpu", "cuda" (cuda:0) or "cuda:N". Throws UsageError naming --device
// for anything else. Does not check that the device exists.
Device parse_device(const std::string& s);

// The device for headings: "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)",
// "cuda:0 (fake GPU (TIDE_FAKE_GPUS))".
std::string device_label(Device d);

// Why traced mode cannot run on `d`, for a UsageError; empty on the CPU.
std::string traced_mode_unsupported(Device d);

int demo_main(const Args& args, const GlobalOptions& global);
int bench_async_main(const Args& args, const GlobalOptions& global);
int mlp_memory_main(const Args& args, const GlobalOptions& global);
int train_fashion_main(const Args& args, const GlobalOptions& global);
int loop_main(const Args& args, const GlobalOptions& global);

}  // namespace tide::cli
