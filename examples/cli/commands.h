// The subcommands of the `tide` command. Each lives in its own file and is listed once in
// main.cpp's table; main strips the options every command shares (--trace FILE, --help)
// and passes the rest. Adding a command: a new file with a `*_main`, one line in the table,
// one source in examples/CMakeLists.txt.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tide::cli {

using Args = std::vector<std::string>;

struct Command {
  const char* name;
  const char* summary;           // one line for `tide --help`
  const char* usage;             // the options after the name, for `tide NAME --help`
  const char* options;           // one line per option, for `tide NAME --help`
  int (*run)(const Args& args);  // returns the exit code
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

int demo_main(const Args& args);
int bench_async_main(const Args& args);
int mlp_memory_main(const Args& args);
int train_fashion_main(const Args& args);
int loop_main(const Args& args);

}  // namespace tide::cli
