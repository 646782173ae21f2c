// `tide bench-async`: the asynchronous-computation experiments S1-S3 at the textbook's
// sizes: 10 x (randn 1000x1000; matmul), 1000x1000 matmuls for the sync points, and
// 10000 x (y = x + 1). Takes several seconds; `tide demo` is the quick version.
#include "examples/cli/async_experiments.h"

namespace tide::cli {

int bench_async_main(const Args& args, const GlobalOptions& global) {
  AsyncSizes sizes;  // the defaults are the textbook's sizes
  sizes.device = global.device;
  return run_async_experiments(parse_async_args(args, sizes), "tide bench-async (textbook sizes)");
}

}  // namespace tide::cli
