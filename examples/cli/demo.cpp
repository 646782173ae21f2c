// `tide demo`: the asynchronous-computation experiments S1-S3 at sizes that finish in a few
// seconds (see async_experiments.h). `tide bench-async` runs the textbook's sizes.
#include "examples/cli/async_experiments.h"

namespace tide::cli {

int demo_main(const Args& args, const GlobalOptions& global) {
  AsyncSizes sizes;
  sizes.device = global.device;
  sizes.s1_n = 300;
  sizes.s1_iters = 10;
  sizes.s2_n = 400;
  sizes.s3_ops = 10000;
  return run_async_experiments(parse_async_args(args, sizes), "tide demo (small sizes)");
}

}  // namespace tide::cli
