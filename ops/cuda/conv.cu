// CUDA launchers of the convolution entries (ops/conv_kernels.h) through cuDNN 9:
// cudnnConvolutionForward (+ cudnnAddTensor for the bias), cudnnConvolutionBackwardData and
// cudnnConvolutionBackwardFilter, in NCHW, cross-correlation as PyTorch's conv2d.
//   - cuDNN is loaded with dlopen on first use (libcudnn.so.9), as cuBLASLt is: a CUDA build
//     runs without cuDNN until a convolution reaches a GPU.
//   - One cuDNN handle per launching thread and device (a stream's worker), set to the
//     task's stream before each call.
//   - The algorithm is chosen once per (entry, geometry, dtype, determinism setting) from
//     cuDNN's heuristics (cudnnGet*Algorithm_v7, best first): with deterministic_algorithms()
//     (core/determinism.h, the default) the first *deterministic* one whose workspace the
//     stream's workspace holds, else the first deterministic one (its workspace then comes
//     from the device allocator); with it off the first that fits, deterministic or not.
//     The entry's math type is set on the descriptor and the workspace is cuDNN's size for
//     that algorithm and math type, both cached with the choice.
//   - float32 asks for CUDNN_FMA_MATH (no TF32) and takes only entries of that math type
//     when the heuristics offer one, so results stay within the CPU's float32 tolerances.
//   - bfloat16 and float16 run in cuDNN's "pseudo half" configuration: 16-bit x, w and y,
//     sums in float (the convolution descriptor's compute type), tensor-core math allowed.
//     Their bias is added by add_channel_bias (in float, rounded once) rather than by
//     cudnnAddTensor, whose 16-bit support tide does not rely on.
//   - Descriptors are made once per thread and (pass, geometry, dtype), not per call.
// Built only where the toolkit has cudnn.h (elsewhere register_conv registers nothing).
// Uses cuDNN's descriptor API, not its graph API: the graph API needs cudnn_frontend, which
// the toolkit does not ship, and the descriptor calls it would wrap are these. Pooling and
// batch normalisation are tide's own kernels (ops/cuda/pool_norm.cu). Compiled in CI;
// written without a GPU to run it on (scripts/gpu_check.sh runs the conv cases of
// tests/ops on one).
#include "ops/cuda/registry.h"

#if __has_include(<cudnn.h>)
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/allocator.h"
#include "core/cuda/await_grids.h"
#include "core/cuda/call_name.h"
#include "core/determinism.h"
#include "core/float16.h"
#include "core/shared_library.h"
#include "ops/conv_kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/scratch.h"
#include "ops/kernel_entry.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN 9 marks this API so

namespace tide::kernels::cuda {

namespace {

// The cuDNN entry points used here, looked up once.
struct Cudnn {
#define TIDE_CUDNN_FN(name) decltype(&::cudnn##name) name;
  TIDE_CUDNN_FN(Create)
  TIDE_CUDNN_FN(SetStream)
  TIDE_CUDNN_FN(GetErrorString)
  TIDE_CUDNN_FN(CreateTensorDescriptor)
  TIDE_CUDNN_FN(SetTensor4dDescriptor)
  TIDE_CUDNN_FN(DestroyTensorDescriptor)
  TIDE_CUDNN_FN(CreateFilterDescriptor)
  TIDE_CUDNN_FN(SetFilter4dDescriptor)
  TIDE_CUDNN_FN(DestroyFilterDescriptor)
  TIDE_CUDNN_FN(CreateConvolutionDescriptor)
  TIDE_CUDNN_FN(SetConvolution2dDescriptor)
  TIDE_CUDNN_FN(SetConvolutionGroupCount)
  TIDE_CUDNN_FN(SetConvolutionMathType)
  TIDE_CUDNN_FN(DestroyConvolutionDescriptor)
  TIDE_CUDNN_FN(GetConvolutionForwardAlgorithm_v7)
  TIDE_CUDNN_FN(GetConvolutionForwardWorkspaceSize)
  TIDE_CUDNN_FN(ConvolutionForward)
  TIDE_CUDNN_FN(GetConvolutionBackwardDataAlgorithm_v7)
  TIDE_CUDNN_FN(GetConvolutionBackwardDataWorkspaceSize)
  TIDE_CUDNN_FN(ConvolutionBackwardData)
  TIDE_CUDNN_FN(GetConvolutionBackwardFilterAlgorithm_v7)
  TIDE_CUDNN_FN(GetConvolutionBackwardFilterWorkspaceSize)
  TIDE_CUDNN_FN(ConvolutionBackwardFilter)
  TIDE_CUDNN_FN(AddTensor)
#undef TIDE_CUDNN_FN
};

Cudnn load() {
  void* lib = tide::detail::load_library(
      {"libcudnn.so.9", "libcudnn.so"}, "cuDNN", "conv2d",
      "install cuDNN 9 for this CUDA (Debian/NVIDIA: libcudnn9-cuda-13) or add its lib "
      "directory to LD_LIBRARY_PATH");
  Cudnn c{};
#define TIDE_CUDNN_BIND(name) \
  tide::detail::bind_symbol(lib, c.name, "cudnn" #name, "cuDNN", "conv2d");
  TIDE_CUDNN_BIND(Create)
  TIDE_CUDNN_BIND(SetStream)
  TIDE_CUDNN_BIND(GetErrorString)
  TIDE_CUDNN_BIND(CreateTensorDescriptor)
  TIDE_CUDNN_BIND(SetTensor4dDescriptor)
  TIDE_CUDNN_BIND(DestroyTensorDescriptor)
  TIDE_CUDNN_BIND(CreateFilterDescriptor)
  TIDE_CUDNN_BIND(SetFilter4dDescriptor)
  TIDE_CUDNN_BIND(DestroyFilterDescriptor)
  TIDE_CUDNN_BIND(CreateConvolutionDescriptor)
  TIDE_CUDNN_BIND(SetConvolution2dDescriptor)
  TIDE_CUDNN_BIND(SetConvolutionGroupCount)
  TIDE_CUDNN_BIND(SetConvolutionMathType)
  TIDE_CUDNN_BIND(DestroyConvolutionDescriptor)
  TIDE_CUDNN_BIND(GetConvolutionForwardAlgorithm_v7)
  TIDE_CUDNN_BIND(GetConvolutionForwardWorkspaceSize)
  TIDE_CUDNN_BIND(ConvolutionForward)
  TIDE_CUDNN_BIND(GetConvolutionBackwardDataAlgorithm_v7)
  TIDE_CUDNN_BIND(GetConvolutionBackwardDataWorkspaceSize)
  TIDE_CUDNN_BIND(ConvolutionBackwardData)
  TIDE_CUDNN_BIND(GetConvolutionBackwardFilterAlgorithm_v7)
  TIDE_CUDNN_BIND(GetConvolutionBackwardFilterWorkspaceSize)
  TIDE_CUDNN_BIND(ConvolutionBackwardFilter)
  TIDE_CUDNN_BIND(AddTensor)
#undef TIDE_CUDNN_BIND
  return c;  // the library stays loaded for the process
}

const Cudnn& dnn() {
  static const Cudnn c = load();  // a failed load throws and is retried on the next call
  return c;
}

void check(cudnnStatus_t st, const char* call) {
  if (st != CUDNN_STATUS_SUCCESS) [[unlikely]]
    throw std::runtime_error(tide::cuda::library_error(call, {}, dnn().GetErrorString(st)));
}

// This thread's handle for the current device, on `stream`.
cudnnHandle_t handle(const KernelContext& ctx) {
  thread_local std::map<int, cudnnHandle_t> handles;  // never destroyed: lives with the thread
  cudnnHandle_t& h = handles[ctx.device.index];
  if (!h) check(dnn().Create(&h), "cudnnCreate");
  check(dnn().SetStream(h, stream_of(ctx)), "cudnnSetStream");
  return h;
}

template <class T>
constexpr cudnnDataType_t dtype_of() {
  if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  else if constexpr (std::is_same_v<T, bfloat16>) return CUDNN_DATA_BFLOAT16;
  else if constexpr (std::is_same_v<T, float16>) return CUDNN_DATA_HALF;
  else return CUDNN_DATA_FLOAT;
}

// The math type asked for before the heuristics run: FMA for float32 (no TF32) and float64,
// tensor cores for the 16-bit types.
template <class T>
constexpr cudnnMathType_t first_math() {
  return is_half_v<T> ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

// The descriptors of one convolution (RAII).
template <class T>
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  explicit ConvDescs(const ConvGeom& g) {
    const Cudnn& d = dnn();
    const cudnnDataType_t t = dtype_of<T>();
    check(d.CreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check(d.CreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check(d.CreateTensorDescriptor(&bias), "cudnnCreateTensorDescriptor");
    check(d.CreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check(d.CreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(d.SetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, int(g.n), int(g.c), int(g.h), int(g.w)),
          "cudnnSetTensor4dDescriptor");
    check(
        d.SetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, t, int(g.n), int(g.o), int(g.oh), int(g.ow)),
        "cudnnSetTensor4dDescriptor");
    check(d.SetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, t, 1, int(g.o), 1, 1),
          "cudnnSetTensor4dDescriptor");
    check(d.SetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, int(g.o), int(g.c / g.groups), int(g.kh),
                                  int(g.kw)),
          "cudnnSetFilter4dDescriptor");
    check(
        d.SetConvolution2dDescriptor(conv, int(g.ph), int(g.pw), int(g.sh), int(g.sw), int(g.dh),
                                     int(g.dw), CUDNN_CROSS_CORRELATION, dtype_of<compute_t<T>>()),
        "cudnnSetConvolution2dDescriptor");
    check(d.SetConvolutionGroupCount(conv, int(g.groups)), "cudnnSetConvolutionGroupCount");
    check(d.SetConvolutionMathType(conv, first_math<T>()), "cudnnSetConvolutionMathType");
  }
  ~ConvDescs() {
    const Cudnn& d = dnn();
    d.DestroyConvolutionDescriptor(conv);
    d.DestroyFilterDescriptor(w);
    d.DestroyTensorDescriptor(bias);
    d.DestroyTensorDescriptor(y);
    d.DestroyTensorDescriptor(x);
  }
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
};

// What an algorithm choice depends on.
enum class Pass : int { forward, data, filter };
using AlgoKey =
    std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, size_t, bool>;
AlgoKey key_of(Pass p, const KernelContext& ctx, cudnnDataType_t t, const ConvGeom& g) {
  return {int(p),
          ctx.device.index,
          int(t),
          g.n,
          g.c,
          g.h,
          g.w,
          g.o,
          g.kh,
          g.kw,
          g.sh,
          g.sw,
          g.ph,
          g.pw,
          g.dh,
          g.dw,
          g.groups,
          ctx.workspace ? ctx.workspace_bytes : 0,
          deterministic_algorithms()};
}

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;  // cuDNN's size for algo under math
};

// The cached choice for key, or pick().
template <class Pick>
Choice choose(const AlgoKey& key, Pick pick) {
  static std::mutex mu;
  static std::map<AlgoKey, Choice> cache;
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const Choice c = pick();
  std::lock_guard lock(mu);
  return cache.emplace(key, c).first->second;
}

// The heuristics' entry to run (the list is best first): among the entries that succeeded,
// are deterministic when `deterministic`, and (float32) are of FMA math when any is, the
// first whose workspace fits, else the first. Its algorithm and math type; the workspace
// is asked of cuDNN afterwards.
template <class Perf>
Choice pick_entry(const Perf* perf, int n, size_t fits, bool deterministic, bool fma_only,
                  const char* what) {
  auto usable = [&](const Perf& p, bool need_fma) {
    return p.status == CUDNN_STATUS_SUCCESS &&
           (!deterministic || p.determinism == CUDNN_DETERMINISTIC) &&
           (!need_fma || p.mathType == CUDNN_FMA_MATH);
  };
  bool any_fma = false;
  for (int i = 0; i < n && fma_only; ++i) any_fma = any_fma || usable(perf[i], true);
  const Perf* best = nullptr;
  for (int i = 0; i < n; ++i) {
    if (!usable(perf[i], any_fma)) continue;
    if (perf[i].memory <= fits) return {int(perf[i].algo), perf[i].mathType, 0};
    if (!best) best = &perf[i];
  }
  if (!best)
    throw std::runtime_error(std::string(what) + ": cuDNN offers no " +
                             (deterministic ? "deterministic " : "") + "algorithm");
  return {int(best->algo), best->mathType, 0};
}

constexpr int kMaxAlgos = 16;

size_t stream_workspace(const KernelContext& ctx) {
  return ctx.workspace ? ctx.workspace_bytes : 0;
}

// This thread's descriptors for key (made on first use; creating and setting five
// descriptors per call cost more than a small convolution's launch). Per thread, since a
// pass sets the math type of its choice on the convolution descriptor.
template <class T>
ConvDescs<T>& descs_for(const AlgoKey& key, const ConvGeom& g) {
  thread_local std::map<AlgoKey, std::unique_ptr<ConvDescs<T>>> cache;  // lives with the thread
  std::unique_ptr<ConvDescs<T>>& d = cache[key];
  if (!d) d = std::make_unique<ConvDescs<T>>(g);
  return *d;
}

// One cuDNN pass: the descriptors, this thread's handle, the cached algorithm choice
// (find(h, d, perf, n) fills cuDNN's heuristics list; size(h, d, algo, bytes) gives the
// workspace of algo under the descriptor's math type), its workspace, then
// run(h, d, algo, workspace, bytes).
template <class T, class Perf, class Find, class Size, class Run>
void run_pass(const KernelContext& ctx, const ConvGeom& g, Pass pass, const char* op, Find find,
              Size size, Run run) {
  const AlgoKey key = key_of(pass, ctx, dtype_of<T>(), g);
  ConvDescs<T>& d = descs_for<T>(key, g);
  cudnnHandle_t h = handle(ctx);
  const Choice c = choose(key, [&] {
    check(dnn().SetConvolutionMathType(d.conv, first_math<T>()), "cudnnSetConvolutionMathType");
    Perf perf[kMaxAlgos];
    int n = 0;
    find(h, d, perf, n);
    Choice c =
        pick_entry(perf, n, stream_workspace(ctx), std::get<18>(key), std::is_same_v<T, float>, op);
    check(dnn().SetConvolutionMathType(d.conv, c.math), "cudnnSetConvolutionMathType");
    size(h, d, c.algo, &c.workspace);
    return c;
  });
  check(dnn().SetConvolutionMathType(d.conv, c.math), "cudnnSetConvolutionMathType");
  StorageRef keep;
  void* ws = scratch(ctx, c.workspace, keep, op);
  run(h, d, c.algo, ws, c.workspace);
}

// y (n, o, hw) += bias[o] for the 16-bit types: the sum in float, rounded once.
template <class T>
__global__ void add_channel_bias(T* y, const T* bias, int64_t o, int64_t hw, int64_t total) {
  tide::cuda::await_prerequisite_grids();
  for (int64_t i = global_index(); i < total; i += grid_stride())
    y[i] = T(float(y[i]) + float(bias[(i / hw) % o]));
}

template <class T>
void conv2d(const KernelContext& ctx, const Conv2dForward<T>& a, const NoExtra&) {
  run_pass<T, cudnnConvolutionFwdAlgoPerf_t>(
      ctx, a.g, Pass::forward, "conv2d",
      [](cudnnHandle_t h, const ConvDescs<T>& d, auto* perf, int& n) {
        check(
            dnn().GetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMaxAlgos, &n, perf),
            "cudnnGetConvolutionForwardAlgorithm_v7");
      },
      [](cudnnHandle_t h, const ConvDescs<T>& d, int algo, size_t* bytes) {
        check(dnn().GetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y,
                                                       cudnnConvolutionFwdAlgo_t(algo), bytes),
              "cudnnGetConvolutionForwardWorkspaceSize");
      },
      [&](cudnnHandle_t h, const ConvDescs<T>& d, int algo, void* ws, size_t bytes) {
        const compute_t<T> one = 1, zero = 0;  // float for 16-bit data, as cuDNN asks
        check(dnn().ConvolutionForward(h, &one, d.x, a.x.get(), d.w, a.weight.get(), d.conv,
                                       cudnnConvolutionFwdAlgo_t(algo), ws, bytes, &zero, d.y,
                                       a.y.get()),
              "cudnnConvolutionForward");
        if (!a.has_bias) return;
        if constexpr (is_half_v<T>) {
          const int64_t total = a.g.n * a.g.o * a.g.oh * a.g.ow;
          add_channel_bias<T><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(
              a.y.get(), a.bias.get(), a.g.o, a.g.oh * a.g.ow, total);
        } else {
          check(dnn().AddTensor(h, &one, d.bias, a.bias.get(), &one, d.y, a.y.get()),
                "cudnnAddTensor");
        }
      });
}

template <class T>
void conv2d_input_grad(const KernelContext& ctx, const Conv2dInputGrad<T>& a, const NoExtra&) {
  run_pass<T, cudnnConvolutionBwdDataAlgoPerf_t>(
      ctx, a.g, Pass::data, "conv2d_input_grad",
      [](cudnnHandle_t h, const ConvDescs<T>& d, auto* perf, int& n) {
        check(dnn().GetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kMaxAlgos, &n,
                                                           perf),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      },
      [](cudnnHandle_t h, const ConvDescs<T>& d, int algo, size_t* bytes) {
        check(dnn().GetConvolutionBackwardDataWorkspaceSize(
                  h, d.w, d.y, d.conv, d.x, cudnnConvolutionBwdDataAlgo_t(algo), bytes),
              "cudnnGetConvolutionBackwardDataWorkspaceSize");
      },
      [&](cudnnHandle_t h, const ConvDescs<T>& d, int algo, void* ws, size_t bytes) {
        const compute_t<T> one = 1, zero = 0;  // float for 16-bit data, as cuDNN asks
        check(dnn().ConvolutionBackwardData(h, &one, d.w, a.weight.get(), d.y, a.dy.get(), d.conv,
                                            cudnnConvolutionBwdDataAlgo_t(algo), ws, bytes, &zero,
                                            d.x, a.dx.get()),
              "cudnnConvolutionBackwardData");
      });
}

template <class T>
void conv2d_weight_grad(const KernelContext& ctx, const Conv2dWeightGrad<T>& a, const NoExtra&) {
  run_pass<T, cudnnConvolutionBwdFilterAlgoPerf_t>(
      ctx, a.g, Pass::filter, "conv2d_weight_grad",
      [](cudnnHandle_t h, const ConvDescs<T>& d, auto* perf, int& n) {
        check(dnn().GetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, kMaxAlgos,
                                                             &n, perf),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      },
      [](cudnnHandle_t h, const ConvDescs<T>& d, int algo, size_t* bytes) {
        check(dnn().GetConvolutionBackwardFilterWorkspaceSize(
                  h, d.x, d.y, d.conv, d.w, cudnnConvolutionBwdFilterAlgo_t(algo), bytes),
              "cudnnGetConvolutionBackwardFilterWorkspaceSize");
      },
      [&](cudnnHandle_t h, const ConvDescs<T>& d, int algo, void* ws, size_t bytes) {
        const compute_t<T> one = 1, zero = 0;  // float for 16-bit data, as cuDNN asks
        check(dnn().ConvolutionBackwardFilter(h, &one, d.x, a.x.get(), d.y, a.dy.get(), d.conv,
                                              cudnnConvolutionBwdFilterAlgo_t(algo), ws, bytes,
                                              &zero, d.w, a.dweight.get()),
              "cudnnConvolutionBackwardFilter");
      });
}

template <class T>
void register_for() {
  CudaKernel<Conv2dForward<T>, NoExtra>::fn = &conv2d<T>;
  CudaKernel<Conv2dInputGrad<T>, NoExtra>::fn = &conv2d_input_grad<T>;
  CudaKernel<Conv2dWeightGrad<T>, NoExtra>::fn = &conv2d_weight_grad<T>;
}

}  // namespace

void register_conv(OpList& ops) {
  register_for<float>();
  register_for<double>();
  register_for<bfloat16>();
  register_for<float16>();
  // The thread's cuDNN handle exists before a CUDA graph captures a convolution:
  // cudnnCreate allocates device memory, which the capture would refuse.
  const CapturePreparer make_handle = [](const KernelContext& ctx) { (void)handle(ctx); };
  for (OpId op : {OpId::conv2d, OpId::conv2d_input_grad, OpId::conv2d_weight_grad}) {
    ops[size_t(op)] = true;
    set_capture_preparer(op, make_handle);
  }
}

}  // namespace tide::kernels::cuda

#pragma GCC diagnostic pop

#else  // a toolkit without cuDNN's headers: the GPU has no convolution kernels

namespace tide::kernels::cuda {
void register_conv(OpList&) {}
}  // namespace tide::kernels::cuda

#endif
