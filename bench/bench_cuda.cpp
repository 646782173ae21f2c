// tide_bench_cuda: the CUDA backend's benchmarks (targets in bench/summarize_cuda.py), each
// next to its anchor measured in the same run (docs/contributing.md, Benchmarks). Built wherever
// nvcc is; runs only on a machine with a GPU (it exits with a message otherwise).
//   enqueue     `y = x + 1` on cuda:0, the frontend's cost alone (the worker launches), next
//               to the same on the CPU: the frontend never calls the driver;
//   tiny ops    10000 dependent `y = y + 1` on one element, queued then synced: executed
//               throughput (PyTorch eager's is in bench/torch_cuda_anchor.py);
//   matmul      4096^3 float32 through tide against a direct cublasSgemm on a stream, same
//               random operands; one product per wait, and eight per wait (the kernels' rate);
//               TF32, bfloat16 and float16 (eight per wait) against cublasGemmEx;
//   bandwidth   add of 64M floats (12 bytes per element moved) against a device-to-device
//               copy of 64M floats (8 bytes per element);
//   MLP step    the textbook MLP (bench_mlp.cpp's sizes) on cuda:0, eager and traced (one
//               CUDA graph per step), one sync per step;
//   graph nodes 10000 tiny adds traced unrolled: a CUDA graph's cost per node, with
//               programmatic edges between the adds (the default) and with ordinary ones
//               (TIDE_CUDA_PDL=0);
//   WHILE node  the same 10000 adds as trace::loop: one graph whose WHILE node runs 16
//               chained adds and one step kernel per launch of its body graph (the
//               default), or one add and its step kernel per launch (vs eager async:
//               BM_CudaTinyOpThroughput);
//               fused, one kernel running the 10000 adds per element;
//   convolutions and the CNN step: bench_cuda_cnn.cpp (against cuDNN called directly).
// Every benchmark times wall-clock and syncs inside the timed region.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "bench/cuda_check.h"
#include "core/cuda/runtime.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "ops/chain_compiler.h"
#include "tide.h"
#include "trace/trace.h"
#include "train/optimizer.h"

namespace {

using tide::Device;
using tide::DType;
using tide::Tensor;

const Device kGpu = Device::cuda(0);

// ---- per-op costs ------------------------------------------------------------------------

void enqueue_tiny_add(benchmark::State& state, Device d) {
  Tensor x = tide::ones({1, 2}, DType::float32, d);
  Tensor y;
  tide::wait_all();
  int64_t k = 0;
  for (auto _ : state) {
    y = x + 1;
    if (++k % 4096 == 0) {  // keep the queue bounded, off the clock
      state.PauseTiming();
      tide::wait_all();
      state.ResumeTiming();
    }
  }
  tide::wait_all();
  state.SetItemsProcessed(state.iterations());
}
void BM_CudaEnqueueTinyAdd(benchmark::State& state) { enqueue_tiny_add(state, kGpu); }
void BM_CpuEnqueueTinyAdd(benchmark::State& state) { enqueue_tiny_add(state, Device::cpu()); }
BENCHMARK(BM_CudaEnqueueTinyAdd)->UseRealTime();
BENCHMARK(BM_CpuEnqueueTinyAdd)->UseRealTime();

// 10000 dependent tiny adds on the GPU, then one sync: ops executed per second.
void BM_CudaTinyOpThroughput(benchmark::State& state) {
  Tensor x = tide::zeros({1}, DType::float32, kGpu);
  tide::wait_all();
  constexpr int kOps = 10000;
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < kOps; ++i) y = y + 1.0;
    y.wait_to_read();
  }
  state.SetItemsProcessed(state.iterations() * kOps);
}
BENCHMARK(BM_CudaTinyOpThroughput)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- matmul 4096^3 -------------------------------------------------------------------------

constexpr int64_t kN = 4096;
void set_flops(benchmark::State& state) {
  state.counters["TFLOP/s"] = benchmark::Counter(
      2.0 * kN * kN * kN * 1e-12 * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_CudaMatmul4096(benchmark::State& state) {
  tide::Generator gen(1);
  Tensor a = tide::randn({kN, kN}, DType::float32, gen, kGpu);
  Tensor b = tide::randn({kN, kN}, DType::float32, gen, kGpu);
  Tensor c = tide::matmul(a, b);  // warm-up: the algorithm is chosen and cached
  c.wait_to_read();
  for (auto _ : state) {
    c = tide::matmul(a, b);
    c.wait_to_read();
  }
  set_flops(state);
}
BENCHMARK(BM_CudaMatmul4096)->UseRealTime()->Unit(benchmark::kMillisecond);

// Eight products queued per wait: the kernels' own rate, without one wait's wake-up per
// product (time per iteration is for the eight).
constexpr int kQueued = 8;
void BM_CudaMatmul4096x8(benchmark::State& state) {
  tide::Generator gen(1);
  Tensor a = tide::randn({kN, kN}, DType::float32, gen, kGpu);
  Tensor b = tide::randn({kN, kN}, DType::float32, gen, kGpu);
  Tensor c = tide::matmul(a, b);
  c.wait_to_read();
  for (auto _ : state) {
    for (int i = 0; i < kQueued; ++i) c = tide::matmul(a, b);
    c.wait_to_read();
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * kN * kN * kN * 1e-12 * kQueued * double(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CudaMatmul4096x8)->UseRealTime()->Unit(benchmark::kMillisecond);

// The anchor: cublasSgemm on a non-blocking stream, FP32 compute (no TF32), as tide uses,
// on the same random operands as tide's (a GPU draws less power on zeros and runs faster).
// `per_sync` products are queued per cudaStreamSynchronize (1, or 8 beside ...x8).
void cublas_sgemm_4096(benchmark::State& state, int per_sync) {
  tide::Generator gen(1);
  Tensor ta = tide::randn({kN, kN}, DType::float32, gen, kGpu);
  Tensor tb = tide::randn({kN, kN}, DType::float32, gen, kGpu);
  ta.wait_to_read();
  tb.wait_to_read();
  const float* a = ta.data<float>();
  const float* b = tb.data<float>();
  float* c;
  CHECK_CUDA(cudaMalloc(&c, size_t(kN * kN) * sizeof(float)));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
  const float one = 1, zero = 0;
  auto gemm = [&] {  // row-major c = a @ b as column-major c^T = b^T a^T
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, int(kN), int(kN), int(kN), &one, b, int(kN), a,
                int(kN), &zero, c, int(kN));
  };
  gemm();
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (auto _ : state) {
    for (int i = 0; i < per_sync; ++i) gemm();
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * kN * kN * kN * 1e-12 * per_sync * double(state.iterations()),
                         benchmark::Counter::kIsRate);
  cublasDestroy(h);
  cudaStreamDestroy(s);
  cudaFree(c);
}
void BM_CublasSgemm4096(benchmark::State& state) { cublas_sgemm_4096(state, 1); }
void BM_CublasSgemm4096x8(benchmark::State& state) { cublas_sgemm_4096(state, kQueued); }
BENCHMARK(BM_CublasSgemm4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CublasSgemm4096x8)->UseRealTime()->Unit(benchmark::kMillisecond);

// The fast precisions, eight products per wait (Arg: 0 float32 at the `high` matmul precision,
// i.e. TF32; 1 bfloat16; 2 float16, each with float32 accumulation), through tide and through
// cublasGemmEx called directly with the same types and compute type (cuBLAS picks its
// cuBLASLt kernel by heuristic, as tide does).
struct FastGemm {
  DType dtype;
  cudaDataType_t cuda_type;
  cublasComputeType_t compute;
  const char* label;
};
constexpr FastGemm kFastGemms[] = {
    {DType::float32, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "tf32"},
    {DType::bfloat16, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bfloat16"},
    {DType::float16, CUDA_R_16F, CUBLAS_COMPUTE_32F, "float16"},
};

void set_flops_x8(benchmark::State& state) {
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * kN * kN * kN * 1e-12 * kQueued * double(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_CudaMatmul4096Fastx8(benchmark::State& state) {
  const FastGemm& f = kFastGemms[state.range(0)];
  tide::Float32MatmulPrecisionGuard precision(tide::MatmulPrecision::high);
  tide::Generator gen(1);
  Tensor a = tide::cast(tide::randn({kN, kN}, DType::float32, gen, kGpu), f.dtype);
  Tensor b = tide::cast(tide::randn({kN, kN}, DType::float32, gen, kGpu), f.dtype);
  Tensor c = tide::matmul(a, b);
  c.wait_to_read();
  for (auto _ : state) {
    for (int i = 0; i < kQueued; ++i) c = tide::matmul(a, b);
    c.wait_to_read();
  }
  set_flops_x8(state);
  state.SetLabel(f.label);
}
BENCHMARK(BM_CudaMatmul4096Fastx8)
    ->ArgName("type")
    ->DenseRange(0, 2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_CublasGemmEx4096Fastx8(benchmark::State& state) {
  const FastGemm& f = kFastGemms[state.range(0)];
  tide::Generator gen(1);
  Tensor ta = tide::cast(tide::randn({kN, kN}, DType::float32, gen, kGpu), f.dtype);
  Tensor tb = tide::cast(tide::randn({kN, kN}, DType::float32, gen, kGpu), f.dtype);
  Tensor tc = tide::cast(tide::zeros({kN, kN}, DType::float32, kGpu), f.dtype);
  tc.wait_to_read();
  const void* a = ta.storage()->data();
  const void* b = tb.storage()->data();
  void* c = tc.storage()->data();
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  const float one = 1, zero = 0;
  auto gemm = [&] {  // row-major c = a @ b as column-major c^T = b^T a^T
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(kN), int(kN), int(kN), &one, b, f.cuda_type,
                 int(kN), a, f.cuda_type, int(kN), &zero, c, f.cuda_type, int(kN), f.compute,
                 CUBLAS_GEMM_DEFAULT);
  };
  gemm();
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (auto _ : state) {
    for (int i = 0; i < kQueued; ++i) gemm();
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  set_flops_x8(state);
  state.SetLabel(f.label);
  cublasDestroy(h);
  cudaStreamDestroy(s);
}
BENCHMARK(BM_CublasGemmEx4096Fastx8)
    ->ArgName("type")
    ->DenseRange(0, 2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- bandwidth: 64M floats -----------------------------------------------------------------

constexpr int64_t kBig = int64_t(64) << 20;

void BM_CudaAdd64M(benchmark::State& state) {
  Tensor a = tide::ones({kBig}, DType::float32, kGpu), b = tide::ones({kBig}, DType::float32, kGpu);
  Tensor c = a + b;
  c.wait_to_read();
  for (auto _ : state) {
    c = a + b;
    c.wait_to_read();
  }
  state.SetBytesProcessed(state.iterations() * kBig * 12);
}
BENCHMARK(BM_CudaAdd64M)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_CudaCopyD2D64M(benchmark::State& state) {
  float *src, *dst;
  size_t bytes = size_t(kBig) * sizeof(float);
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (auto _ : state) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  state.SetBytesProcessed(state.iterations() * int64_t(bytes) * 2);
  cudaStreamDestroy(s);
  cudaFree(src);
  cudaFree(dst);
}
BENCHMARK(BM_CudaCopyD2D64M)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- the textbook MLP step ------------------------------------------------------------------

// The textbook step, eager or traced (trace::function: one CUDA graph per step after one
// eager warm-up call), one sync per step.
void textbook_step(benchmark::State& state, bool traced) {
  namespace nn = tide::nn;
  tide::Generator gen(42);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions(512, 2048), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(2048, 512), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(512, 1), gen)});
  net->to(kGpu);
  tide::train::SGD opt(net->parameters(), tide::train::SGDOptions(0.005));
  Tensor x = tide::randn({1024, 512}, DType::float32, gen, kGpu);
  Tensor y = tide::ones({1024, 1}, DType::float32, kGpu);
  auto step = [&](const Tensor& xb, const Tensor& yb) {
    opt.zero_grad();
    Tensor loss = tide::nn::l2_loss((*net)(xb), yb);
    loss.backward();
    opt.step();
    return loss;
  };
  auto f = tide::trace::function(step, {.name = "textbook_step", .warmup_calls = 1});
  for (int i = 0; i < 3; ++i) (traced ? f(x, y) : step(x, y)).wait_to_read();  // trace, build
  float loss_value = 0;
  for (auto _ : state) {
    Tensor loss = traced ? f(x, y) : step(x, y);
    tide::wait_all();
    loss_value = loss.item<float>();
  }
  state.counters["loss"] = loss_value;
  if (traced) {
    tide::trace::FunctionStats s = f.stats();
    state.counters["graph_nodes"] = double(s.graph_nodes);
    if (!s.graph_fallback.empty()) state.SetLabel("no graph: " + s.graph_fallback);
  }
}
void BM_CudaTextbookMlpStep(benchmark::State& state) { textbook_step(state, false); }
void BM_CudaTracedTextbookMlpStep(benchmark::State& state) { textbook_step(state, true); }
BENCHMARK(BM_CudaTextbookMlpStep)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaTracedTextbookMlpStep)->UseRealTime()->Unit(benchmark::kMillisecond);

// 10000 dependent tiny adds as one traced function on one element, replayed and waited for
// each iteration; the graph's node count as a counter.
constexpr int kTinyAdds = 10000;
template <class Body>
void replay_tiny_adds(benchmark::State& state, Body body, tide::trace::Options options) {
  auto f = tide::trace::function(body, options);
  Tensor x = tide::zeros({1}, DType::float32, kGpu);
  for (int i = 0; i < 2; ++i) f(x).wait_to_read();  // trace, build
  for (auto _ : state) f(x).wait_to_read();
  state.SetItemsProcessed(state.iterations() * kTinyAdds);
  tide::trace::FunctionStats s = f.stats();
  state.counters["graph_nodes"] = double(s.graph_nodes);
  state.counters["compiled_chains"] = double(s.compiled_chains);
  if (!s.graph_fallback.empty()) state.SetLabel("no graph: " + s.graph_fallback);
  else if (!s.chain_fallback.empty()) state.SetLabel("interpreted: " + s.chain_fallback);
}

// Runs `bench` with programmatic edges between tide's kernels (the default: each kernel
// launches while the one before it runs and waits for it on the device) or with ordinary
// ones (TIDE_CUDA_PDL=0), whatever the process's setting, and counts the programmatic
// edges its graphs got (0 where CUDA refused them and the graph was built again).
void with_edges(benchmark::State& state, void (*bench)(benchmark::State&), bool programmatic) {
  const bool was = tide::cuda::programmatic_edges_enabled();
  tide::cuda::set_programmatic_edges_enabled(programmatic);  // read when the graph is built
  const uint64_t edges = tide::cuda::programmatic_edges_added();
  bench(state);
  state.counters["programmatic_edges"] = double(tide::cuda::programmatic_edges_added() - edges);
  tide::cuda::set_programmatic_edges_enabled(was);
}

// Unrolled: one CUDA graph of 10000 kernel nodes (and two copies) per replay. Time per
// replay / 10000 = what one graph node costs.
void graph_tiny_adds(benchmark::State& state) {
  auto chain = [](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < kTinyAdds; ++i) y = y + 1.0;
    return y;
  };
  replay_tiny_adds(state, chain, {.name = "tiny_adds"});
}
void BM_CudaGraphTinyAdds(benchmark::State& state) { with_edges(state, graph_tiny_adds, false); }
void BM_CudaGraphTinyAddsProgrammatic(benchmark::State& state) {
  with_edges(state, graph_tiny_adds, true);
}
BENCHMARK(BM_CudaGraphTinyAdds)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaGraphTinyAddsProgrammatic)->UseRealTime()->Unit(benchmark::kMillisecond);

// As a traced loop: a WHILE node (the count kept on the device) running 16 iterations per
// launch of its body graph (the default for a body this small), or one per launch; or
// fused: one kernel applying all 10000 adds per element.
void loop_tiny_adds(benchmark::State& state, tide::trace::Fusion fusion, int unroll = 0) {
  auto looped = [](const Tensor& x) {
    return tide::trace::loop(
        kTinyAdds, [](const Tensor& y) { return y + 1.0; }, x);
  };
  replay_tiny_adds(state, looped, {.name = "loop_adds", .fusion = fusion, .loop_unroll = unroll});
}
// The WHILE node with ordinary edges (16 iterations per launch, or one), and with
// programmatic ones (the default): in its body, each add and step kernel launches while
// the one before it runs.
void while_tiny_adds(benchmark::State& state) { loop_tiny_adds(state, tide::trace::Fusion::none); }
void while_tiny_adds_one_per_launch(benchmark::State& state) {
  loop_tiny_adds(state, tide::trace::Fusion::none, 1);
}
void BM_CudaWhileTinyAdds(benchmark::State& state) { with_edges(state, while_tiny_adds, false); }
void BM_CudaWhileTinyAddsOnePerLaunch(benchmark::State& state) {
  with_edges(state, while_tiny_adds_one_per_launch, false);
}
void BM_CudaWhileTinyAddsProgrammatic(benchmark::State& state) {
  with_edges(state, while_tiny_adds, true);
}
void BM_CudaFusedLoopTinyAdds(benchmark::State& state) {
  loop_tiny_adds(state, tide::trace::Fusion::elementwise);
}
BENCHMARK(BM_CudaWhileTinyAdds)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaWhileTinyAddsOnePerLaunch)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaWhileTinyAddsProgrammatic)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaFusedLoopTinyAdds)->UseRealTime()->Unit(benchmark::kMillisecond);

// A fused loop whose body is three steps (y = (y + 1) * 0.5 - 0.25), the state in
// registers: as the chain's NVRTC-compiled kernel (the default), and through the step
// interpreter, which dispatches each step per iteration.
void fused_loop_three_steps(benchmark::State& state, bool compiled) {
  auto looped = [](const Tensor& x) {
    return tide::trace::loop(
        kTinyAdds, [](const Tensor& y) { return (y + 1.0) * 0.5 - 0.25; }, x);
  };
  const bool was = tide::kernels::compiled_chains_enabled();
  tide::kernels::set_compiled_chains_enabled(compiled);  // read when the trace is prepared
  replay_tiny_adds(state, looped,
                   {.name = "loop_three", .fusion = tide::trace::Fusion::elementwise});
  tide::kernels::set_compiled_chains_enabled(was);
}
void BM_CudaFusedLoopThreeSteps(benchmark::State& state) { fused_loop_three_steps(state, true); }
void BM_CudaFusedLoopThreeStepsInterpreted(benchmark::State& state) {
  fused_loop_three_steps(state, false);
}
BENCHMARK(BM_CudaFusedLoopThreeSteps)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaFusedLoopThreeStepsInterpreted)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  if (tide::cuda::device_count() == 0) {
    std::printf("tide_bench_cuda: no CUDA device on this machine; nothing to measure\n");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("device", tide::cuda::DeviceRuntime::get(0).api().name());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
