// The textbook's asynchronous-computation experiments (D2L "Asynchronous Computation",
// PyTorch and MXNet variants) on tide, shared by `tide demo` (small sizes) and
// `tide bench-async` (the textbook's sizes):
//   S1  enqueue vs completion of 10 x (randn n x n; matmul) against a synchronous reference
//   S2  wait_to_read (one tensor) vs wait_all (everything); to_vector and item as sync points
//   S3  10000 x (y = x + 1) synced after every op vs once, with the model t1 + N t2 + t3
// Prints one table per experiment. Not a benchmark harness: bench/ has the Google Benchmark
// suites with anchors; these runs favour a readable explanation over statistical rigour.
// With --device cuda[:N] every tensor the experiments create is created on that GPU (S1's
// synchronous reference stays on the CPU, like the textbook's NumPy); the tables name the
// device.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "examples/cli/commands.h"

namespace tide::cli {

struct AsyncSizes {
  int64_t s1_n = 1000;  // S1: s1_iters x (randn s1_n x s1_n; matmul(x, x))
  int s1_iters = 10;
  int64_t s2_n = 1000;            // S2: the size of the "big" matmuls
  int s3_ops = 10000;             // S3: the number of y = x + 1
  int runs = 3;                   // repetitions of each measurement; medians are reported
  Device device = Device::cpu();  // where tide's tensors are created (--device)
};

// Applies the command line (--runs N) to `sizes`. Throws UsageError.
AsyncSizes parse_async_args(const Args& args, AsyncSizes sizes);

// Runs S1-S3, printing as it goes. Returns 0, or 1 when a result check failed (S1's product
// differs from the reference, or S3's y is not x + 1).
int run_async_experiments(const AsyncSizes& sizes, const char* title);

}  // namespace tide::cli
