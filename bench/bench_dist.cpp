// Data-parallel training on one machine: the textbook MLP step (512-2048-512-1,
// L2 loss, SGD lr 0.005, global batch 1024) run by every rank of
//   mpirun -n 2 --oversubscribe build/bench/tide_bench_dist
// with dist::DataParallel averaging the gradients, its all-reduces overlapped with backward
// or started after it, eager or traced; next to the same step in one rank with no
// communication, and the all-reduce of one step's gradient bytes alone (the communication
// cost the scaling model in bench/RESULTS.md uses).
//
// Every rank must run the same benchmarks with the same iteration counts, or their
// collectives would not match: the iteration counts are fixed (kIterations), and every
// rank gets the same command line from mpirun. Rank 0 alone reports; its numbers are the
// job's (every step ends on each rank with the loss read, after the whole step ran).
//
// Not here: PyTorch DDP's figures (bench/peers/ddp_step.py measures them).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "bench/textbook_mlp.h"
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/optimizer.h"

namespace {

using tide::Tensor;

using namespace tide_bench;      // kBatch, kIn, kH1, kH2, kOut, kLr, textbook_mlp
constexpr int kIterations = 30;  // fixed: every rank must run the same number of steps

enum Comm : int64_t { kNone = 0, kOverlap = 1, kAfterBackward = 2 };

// Args: {comm: 0 = no data parallelism (this rank's batch alone, no collective), 1 = the
// gradient average overlapped with backward (DataParallel's default), 2 = started after
// backward (overlap(false)); traced: 0 eager, 1 the whole step in trace::function}.
// Per-rank batch: 1024 / ranks (comm 0 too, so it is the compute the ranks share).
void BM_DataParallelStep(benchmark::State& state) {
  tide::dist::ProcessGroup& group = tide::dist::mpi_world();
  const Comm comm = Comm(state.range(0));
  const bool traced = state.range(1) != 0;
  const int64_t per_rank = kBatch / group.size();
  tide::Generator gen{42};
  auto net = textbook_mlp(gen);
  tide::train::SGD opt(net->parameters(), tide::train::SGDOptions(kLr));
  std::unique_ptr<tide::dist::DataParallel> dp;
  if (comm != kNone)
    dp = std::make_unique<tide::dist::DataParallel>(
        *net, group, tide::dist::DataParallelOptions().overlap(comm == kOverlap));
  tide::Generator data{uint64_t(group.rank()) + 1};  // each rank its own examples
  Tensor x = tide::randn({per_rank, kIn}, tide::DType::float32, data);
  Tensor y = tide::ones({per_rank, kOut});
  auto step = [&](const Tensor& xs, const Tensor& ys) {
    opt.zero_grad();
    Tensor loss = tide::nn::l2_loss((*net)(xs), ys);
    loss.backward();
    if (dp) dp->reduce_gradients();
    opt.step();
    return loss;
  };
  auto traced_step = tide::trace::function(step, {.name = "dp_step", .warmup_calls = 1});
  // Warm-up outside the timing (and the trace, traced).
  for (int i = 0; i < 3; ++i) (traced ? traced_step(x, y) : step(x, y)).item<float>();
  tide::wait_all();
  float loss_value = 0;
  for (auto _ : state) {
    Tensor loss = traced ? traced_step(x, y) : step(x, y);
    tide::wait_all();  // the step's update and last all-reduce, not only the forward pass
    loss_value = loss.item<float>();
  }
  state.counters["ranks"] = group.size();
  state.counters["batch_per_rank"] = double(per_rank);
  state.counters["allreduce_MB_per_step"] = dp ? double(dp->bytes_per_step()) / 1e6 : 0.0;
  state.counters["buckets"] = dp ? double(dp->buckets().size()) : 0.0;
  state.counters["loss"] = loss_value;
}
BENCHMARK(BM_DataParallelStep)
    ->ArgNames({"comm", "traced"})
    ->Args({kNone, 0})
    ->Args({kOverlap, 0})
    ->Args({kAfterBackward, 0})
    ->Args({kOverlap, 1})
    ->Args({kAfterBackward, 1})
    ->Iterations(kIterations)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One all-reduce (average) of a flat float32 buffer as large as the MLP's gradients
// (2,099,713 floats, 8.4 MB), waited for: what the ranks pay to communicate one step, with
// nothing to overlap it with. bytes/s counts this rank's buffer once.
void BM_AllReduceStepGradients(benchmark::State& state) {
  tide::dist::ProcessGroup& group = tide::dist::mpi_world();
  const int64_t n = kIn * kH1 + kH1 + kH1 * kH2 + kH2 + kH2 * kOut + kOut;
  Tensor flat = tide::ones({n});
  for (auto _ : state) {
    group.all_reduce(flat, tide::dist::ReduceOp::average);
    flat.wait_to_read();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * int64_t(sizeof(float)));
  state.counters["ranks"] = group.size();
}
BENCHMARK(BM_AllReduceStepGradients)
    ->Iterations(kIterations)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Rank 0 reports; the others run the same benchmarks silently.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  tide::dist::ProcessGroup& group = tide::dist::mpi_world(&argc, &argv);
  if (group.rank() != 0) {  // --benchmark_out is rank 0's file: the others would race on it
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::string_view(argv[i]).rfind("--benchmark_out", 0) != 0) argv[kept++] = argv[i];
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (group.rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}
