// tide_bench_cuda's convolution benchmarks (main() is in bench_cuda.cpp), each
// next to its anchor in the same run (docs/contributing.md, Benchmarks). 3x3 convolutions, padding
// 1, stride 1, float32 NCHW, on random operands made by tide on cuda:0:
//   BM_CudaConv     tide::conv2d / conv2d_input_grad / conv2d_weight_grad, one wait per call;
//   BM_CudnnConv    the same pass through cuDNN called directly on a non-blocking stream,
//                   one cudaStreamSynchronize per call, with the algorithm cuDNN's
//                   heuristics list first (algo:0) or the one tide picks (algo:1: the first
//                   deterministic one whose workspace fits a stream's, ops/cuda/conv.cu);
//   BM_CudaCnnStep  one training step of the Fashion-MNIST CNN on cuda:0, eager and traced
//                   (PyTorch's is in bench/torch_cuda_anchor.py).
// The target: tide's rate >= 95 % of cuDNN's (bench/summarize_cuda.py pairs the rows).
// The anchor opens the libcudnn.so.9 tide opens (dlopen, not a link): on a machine without
// it tide_bench_cuda still starts and measures the rest; tide's and the anchor's
// convolutions (and the CNN step) skip, naming the reason.
// Built only where cudnn.h is, as tide's cuDNN kernels are; without it BM_CudnnConv is
// absent and BM_CudaConv skips ("no CUDA kernel").
#include <benchmark/benchmark.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "bench/cuda_check.h"
#include "examples/cli/fashion_cnn.h"
#include "nn/nn.h"
#include "ops/conv.h"
#include "tide.h"
#include "trace/trace.h"
#include "train/optimizer.h"

#if __has_include(<cudnn.h>)
#include <cudnn.h>

#include "core/cuda/cuda_stream.h"
#include "core/shared_library.h"
#define TIDE_BENCH_CUDNN 1
#endif

namespace {

using tide::DType;
using tide::Tensor;

const tide::Device kGpu = tide::Device::cuda(0);

// The CNN's two convolutions at batch 128, then a ResNet-like 64->64 layer on 56x56.
struct ConvCase {
  int64_t n, c, o, side;
};
constexpr ConvCase kConvs[] = {{128, 1, 32, 28}, {128, 32, 64, 14}, {32, 64, 64, 56}};

enum class Pass : int { forward, data, filter };

void set_tflops(benchmark::State& state, const ConvCase& cs) {  // the same for each pass
  const double flop = 2.0 * double(cs.n * cs.o * cs.c * 9 * cs.side * cs.side);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flop * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

// x (N, C, S, S), w (O, C, 3, 3), dy (N, O, S, S): the same draws for tide and the anchor
// (a GPU runs zeros at lower power, hence faster).
struct Operands {
  explicit Operands(const ConvCase& cs) {
    tide::Generator gen{3};
    x = tide::randn({cs.n, cs.c, cs.side, cs.side}, DType::float32, gen, kGpu);
    w = tide::randn({cs.o, cs.c, 3, 3}, DType::float32, gen, kGpu);
    dy = tide::randn({cs.n, cs.o, cs.side, cs.side}, DType::float32, gen, kGpu);
    tide::wait_all();
  }
  Tensor x, w, dy;
};

// Runs f untimed (cuDNN loaded, algorithms chosen and cached, traces built). On failure
// skips the benchmark with the message and clears the engine's pending failures, so the
// benchmarks after it still run.
template <class F>
bool warm_up(benchmark::State& state, F f) {
  try {
    f();
    tide::wait_all();
    return true;
  } catch (const std::exception& e) {
    try {
      tide::wait_all();
    } catch (const std::exception&) {
    }
    state.SkipWithError(e.what());
    return false;
  }
}

// ---- tide ---------------------------------------------------------------------------------

// Args: {conv case, pass: 0 forward, 1 input gradient, 2 weight gradient}.
void BM_CudaConv(benchmark::State& state) {
  const ConvCase cs = kConvs[state.range(0)];
  const Pass pass = Pass(state.range(1));
  Operands t(cs);
  const auto opt = tide::Conv2dOptions().padding(1);
  auto run = [&] {
    switch (pass) {
      case Pass::forward: return tide::conv2d(t.x, t.w, Tensor(), opt);
      case Pass::data: return tide::conv2d_input_grad(t.dy, t.w, t.x.shape(), opt);
      default: return tide::conv2d_weight_grad(t.dy, t.x, t.w.shape(), opt);
    }
  };
  if (!warm_up(state, [&] { run().wait_to_read(); })) return;
  for (auto _ : state) run().wait_to_read();
  set_tflops(state, cs);
}
BENCHMARK(BM_CudaConv)
    ->ArgNames({"conv", "pass"})
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- cuDNN called directly -----------------------------------------------------------------

#ifdef TIDE_BENCH_CUDNN
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN 9 marks this API so

// The cuDNN entry points the anchor calls, each as X(name without "cudnn").
// clang-format off
#define TIDE_BENCH_CUDNN_FNS(X) \
  X(GetVersion) X(GetErrorString) X(Create) X(Destroy) X(SetStream) \
  X(CreateTensorDescriptor) X(SetTensor4dDescriptor) X(DestroyTensorDescriptor) \
  X(CreateFilterDescriptor) X(SetFilter4dDescriptor) X(DestroyFilterDescriptor) \
  X(CreateConvolutionDescriptor) X(SetConvolution2dDescriptor) X(SetConvolutionMathType) \
  X(DestroyConvolutionDescriptor) X(GetConvolutionForwardAlgorithm_v7) \
  X(ConvolutionForward) X(GetConvolutionBackwardDataAlgorithm_v7) \
  X(ConvolutionBackwardData) X(GetConvolutionBackwardFilterAlgorithm_v7) \
  X(ConvolutionBackwardFilter)
// clang-format on

struct Cudnn {
#define TIDE_BENCH_FN(name) decltype(&::cudnn##name) name = nullptr;
  TIDE_BENCH_CUDNN_FNS(TIDE_BENCH_FN)
#undef TIDE_BENCH_FN
};

// Loaded once; a failed load throws tide::Error and is retried by the next call.
const Cudnn& cudnn() {
  static const Cudnn api = [] {
    void* lib = tide::detail::load_library({"libcudnn.so.9", "libcudnn.so"}, "cuDNN",
                                           "BM_CudnnConv", "the anchor needs cuDNN 9");
    Cudnn c;
#define TIDE_BENCH_BIND(name) \
  tide::detail::bind_symbol(lib, c.name, "cudnn" #name, "cuDNN", "BM_CudnnConv");
    TIDE_BENCH_CUDNN_FNS(TIDE_BENCH_BIND)
#undef TIDE_BENCH_BIND
    return c;
  }();
  return api;
}

// One entry of cuDNN's heuristics list that can run.
struct Candidate {
  int algo;
  size_t workspace;
  bool deterministic;
};

template <class Perf>
std::vector<Candidate> usable(const Perf* perf, int n) {
  std::vector<Candidate> out;
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS)
      out.push_back(
          {int(perf[i].algo), perf[i].memory, perf[i].determinism == CUDNN_DETERMINISTIC});
  return out;
}

// algo:0 the list's first entry; algo:1 tide's rule (ops/cuda/conv.cu first_deterministic):
// the first deterministic entry whose workspace fits a stream's, else the first
// deterministic one. Null when there is none.
const Candidate* choose(const std::vector<Candidate>& list, int variant) {
  if (variant == 0) return list.empty() ? nullptr : &list[0];
  const Candidate* first = nullptr;
  for (const Candidate& c : list) {
    if (!c.deterministic) continue;
    if (c.workspace <= tide::cuda::CudaStream::kWorkspaceBytes) return &c;
    if (!first) first = &c;
  }
  return first;
}

// One convolution's handle (on `stream`) and descriptors, set up as ops/cuda/conv.cu sets
// them: NCHW float32, cross-correlation, CUDNN_FMA_MATH (no TF32). The first failing call
// is kept in error().
class CudnnConv {
 public:
  CudnnConv(const ConvCase& cs, cudaStream_t stream) {
    const int n = int(cs.n), c = int(cs.c), o = int(cs.o), s = int(cs.side);
    ok(d_.Create(&h_), "cudnnCreate") && ok(d_.SetStream(h_, stream), "cudnnSetStream") &&
        ok(d_.CreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor") &&
        ok(d_.CreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor") &&
        ok(d_.CreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor") &&
        ok(d_.CreateConvolutionDescriptor(&conv_), "cudnnCreateConvolutionDescriptor") &&
        ok(d_.SetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, s, s),
           "cudnnSetTensor4dDescriptor") &&
        ok(d_.SetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, o, s, s),
           "cudnnSetTensor4dDescriptor") &&
        ok(d_.SetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, o, c, 3, 3),
           "cudnnSetFilter4dDescriptor") &&
        ok(d_.SetConvolution2dDescriptor(conv_, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                         CUDNN_DATA_FLOAT),
           "cudnnSetConvolution2dDescriptor") &&
        ok(d_.SetConvolutionMathType(conv_, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  }
  ~CudnnConv() {
    if (conv_) d_.DestroyConvolutionDescriptor(conv_);
    if (w_) d_.DestroyFilterDescriptor(w_);
    if (y_) d_.DestroyTensorDescriptor(y_);
    if (x_) d_.DestroyTensorDescriptor(x_);
    if (h_) d_.Destroy(h_);
  }
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  const std::string& error() const { return error_; }

  // cuDNN's heuristics list for `pass` (best first), its runnable entries.
  std::vector<Candidate> heuristics(Pass pass) {
    constexpr int kMax = 16;
    int n = 0;
    switch (pass) {
      case Pass::forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[kMax];
        if (!ok(d_.GetConvolutionForwardAlgorithm_v7(h_, x_, w_, conv_, y_, kMax, &n, perf),
                "cudnnGetConvolutionForwardAlgorithm_v7"))
          return {};
        return usable(perf, n);
      }
      case Pass::data: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
        if (!ok(d_.GetConvolutionBackwardDataAlgorithm_v7(h_, w_, y_, conv_, x_, kMax, &n, perf),
                "cudnnGetConvolutionBackwardDataAlgorithm_v7"))
          return {};
        return usable(perf, n);
      }
      default: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
        if (!ok(d_.GetConvolutionBackwardFilterAlgorithm_v7(h_, x_, y_, conv_, w_, kMax, &n, perf),
                "cudnnGetConvolutionBackwardFilterAlgorithm_v7"))
          return {};
        return usable(perf, n);
      }
    }
  }

  // Queues one pass writing `out` (y, dx or dw); false (and error()) when cuDNN refuses.
  bool run(Pass pass, const Candidate& a, const float* x, const float* w, const float* dy,
           float* out, void* ws) {
    const float one = 1, zero = 0;
    switch (pass) {
      case Pass::forward:
        return ok(
            d_.ConvolutionForward(h_, &one, x_, x, w_, w, conv_, cudnnConvolutionFwdAlgo_t(a.algo),
                                  ws, a.workspace, &zero, y_, out),
            "cudnnConvolutionForward");
      case Pass::data:
        return ok(d_.ConvolutionBackwardData(h_, &one, w_, w, y_, dy, conv_,
                                             cudnnConvolutionBwdDataAlgo_t(a.algo), ws, a.workspace,
                                             &zero, x_, out),
                  "cudnnConvolutionBackwardData");
      default:
        return ok(d_.ConvolutionBackwardFilter(h_, &one, x_, x, y_, dy, conv_,
                                               cudnnConvolutionBwdFilterAlgo_t(a.algo), ws,
                                               a.workspace, &zero, w_, out),
                  "cudnnConvolutionBackwardFilter");
    }
  }

 private:
  bool ok(cudnnStatus_t st, const char* call) {
    if (st == CUDNN_STATUS_SUCCESS) return true;
    if (error_.empty()) error_ = std::string(call) + ": " + d_.GetErrorString(st);
    return false;
  }

  const Cudnn& d_ = cudnn();
  cudnnHandle_t h_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::string error_;
};

// A cudaMalloc'ed buffer and a non-blocking stream, released at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    if (bytes) CHECK_CUDA(cudaMalloc(&p, bytes));
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* p = nullptr;
};
struct Stream {
  Stream() { CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t s = nullptr;
};

// Times algorithm `a` on `pass` into `out`, one synchronize per call, after one untimed
// call; its workspace is allocated once, here.
void time_pass(benchmark::State& state, CudnnConv& conv, Pass pass, const Candidate& a,
               const Operands& t, void* out, cudaStream_t s) {
  DeviceBuffer ws(a.workspace);
  auto run = [&] {
    return conv.run(pass, a, t.x.data<float>(), t.w.data<float>(), t.dy.data<float>(),
                    static_cast<float*>(out), ws.p);
  };
  if (!run()) {
    state.SkipWithError(conv.error().c_str());
    return;
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (auto _ : state) {
    if (!run()) {
      state.SkipWithError(conv.error().c_str());
      break;
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  state.counters["cudnn_algo"] = a.algo;
  state.counters["workspace_MiB"] = double(a.workspace) / double(1 << 20);
  state.SetLabel("cuDNN " + std::to_string(cudnn().GetVersion()));
}

// Args: {conv case, pass, algo: 0 the heuristics' first, 1 tide's choice}. Counters: the
// cuDNN algorithm (its value in the pass's cudnnConvolution*Algo_t) and its workspace.
void BM_CudnnConv(benchmark::State& state) {
  const ConvCase cs = kConvs[state.range(0)];
  const Pass pass = Pass(state.range(1));
  try {
    cudnn();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Operands t(cs);
  const int64_t out_numel = pass == Pass::forward ? cs.n * cs.o * cs.side * cs.side
                            : pass == Pass::data  ? cs.n * cs.c * cs.side * cs.side
                                                  : cs.o * cs.c * 9;
  DeviceBuffer out(size_t(out_numel) * sizeof(float));
  Stream s;
  CudnnConv conv(cs, s.s);  // destroyed before the stream
  const std::vector<Candidate> list = conv.heuristics(pass);
  const Candidate* a = choose(list, int(state.range(2)));
  if (!conv.error().empty()) {
    state.SkipWithError(conv.error().c_str());
    return;
  }
  if (!a) {
    state.SkipWithError("cuDNN lists no runnable algorithm of this kind for this pass");
    return;
  }
  time_pass(state, conv, pass, *a, t, out.p, s.s);
  set_tflops(state, cs);
}
BENCHMARK(BM_CudnnConv)
    ->ArgNames({"conv", "pass", "algo"})
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

#pragma GCC diagnostic pop
#endif  // TIDE_BENCH_CUDNN

// ---- the Fashion-MNIST CNN step --------------------------------------------------------------

constexpr int64_t kBatch = 128, kSide = 28, kClasses = 10;

// bench_cnn.cpp's BM_CnnStep on cuda:0: zero_grad, forward, cross_entropy, backward, Adam
// (lr 1e-3) on one fixed batch of 128 random images, labels 0..9 in turn; then wait_all and
// loss.item(). Arg traced: 0 eager, 1 trace::function (one eager warm-up call makes Adam's
// moments, the next traces; then one CUDA graph per step).
void BM_CudaCnnStep(benchmark::State& state) {
  namespace nn = tide::nn;
  const bool traced = state.range(0) != 0;
  tide::Generator gen{7};
  std::shared_ptr<nn::Sequential> net = tide::examples::fashion_cnn(kSide, kSide, gen);
  net->to(kGpu);  // before the optimizer, so its state is made on the GPU
  tide::train::Adam opt(net->parameters(), tide::train::AdamOptions(1e-3));
  Tensor x = tide::randn({kBatch, 1, kSide, kSide}, DType::float32, gen, kGpu);
  std::vector<int64_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[size_t(i)] = i % kClasses;
  Tensor y = tide::from_vector(labels, {kBatch}, kGpu);
  auto step = [&](const Tensor& xb, const Tensor& yb) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy((*net)(xb), yb);
    loss.backward();
    opt.step();
    return loss.detach();
  };
  auto f = tide::trace::function(step, {.name = "cuda_cnn_step", .warmup_calls = 1});
  auto call = [&] { return traced ? f(x, y) : step(x, y); };
  if (!warm_up(state, [&] {
        for (int i = 0; i < 3; ++i) call().wait_to_read();  // warm-up, trace, graph build
      }))
    return;
  float loss = 0;
  for (auto _ : state) {
    Tensor l = call();
    tide::wait_all();
    loss = l.item<float>();
  }
  state.counters["loss"] = loss;
  if (traced) {
    tide::trace::FunctionStats s = f.stats();
    state.counters["graph_nodes"] = double(s.graph_nodes);
    if (!s.graph_fallback.empty()) state.SetLabel("no graph: " + s.graph_fallback);
  }
}
BENCHMARK(BM_CudaCnnStep)
    ->ArgName("traced")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
