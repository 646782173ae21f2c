// The real DeviceApi over the CUDA runtime and cuBLASLt (CUDA builds only). Every call
// makes its device current first (cached per thread). Compiled here without a GPU; run
// by the CUDA tests and scripts/gpu_check.sh where one is.
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/call_name.h"
#include "core/cuda/check.h"
#include "core/cuda/cublaslt.h"
#include "core/cuda/dependent_launch.h"
#include "core/cuda/device_api.h"
#include "core/cuda/graph_loop.h"
#include "core/error.h"

namespace tide::cuda {

namespace {

// Errors after which the context is unusable: every later call returns them again.
bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed: return true;
    default: return false;
  }
}

}  // namespace

void throw_cuda_error(const char* call, cudaError_t e) {
  // The error is reported here: a call that failed also set the thread's last error,
  // which the next launch check (CudaStream::run) would otherwise blame on its own op,
  // failing work that the caller recovered from (a graph build that falls back). A
  // sticky error stays: every later call returns it anyway.
  if (!is_sticky(e)) (void)cudaGetLastError();
  throw Error("cuda", library_error(call, cudaGetErrorName(e), cudaGetErrorString(e)));
}

namespace {

Status status_of(cudaError_t e) {
  if (e == cudaSuccess) return {};
  if (e == cudaErrorNotReady) return {Status::not_ready, "not ready"};
  return {is_sticky(e) ? Status::sticky : Status::error,
          std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)};
}

cudaMemcpyKind memcpy_kind(CopyKind kind) {
  return kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
         : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                            : cudaMemcpyDeviceToDevice;
}

__global__ void write_value(volatile unsigned long long* p, unsigned long long v) {
  tide::cuda::await_prerequisite_grids();
  *p = v;
  __threadfence_system();
}

struct Words {
  unsigned long long v[DeviceApi::kMaxWords];
};
__global__ void write_words_kernel(unsigned long long* dst, Words w, int n) {
  tide::cuda::await_prerequisite_grids();
  if (int(threadIdx.x) < n) dst[threadIdx.x] = w.v[threadIdx.x];
}

class CudaApi final : public DeviceApi {
 public:
  explicit CudaApi(int index) : index_(index) {
    make_current();
    cudaDeviceProp prop{};
    TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    name_ = std::string(prop.name) + " (cuda:" + std::to_string(index) + ")";
  }

  std::string name() const override { return name_; }

  void make_current() override {
    thread_local int current = -1;
    if (current == index_) return;
    TIDE_CUDA_CHECK(cudaSetDevice(index_));
    current = index_;
  }

  void* malloc(size_t bytes) override {
    make_current();
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so it is not blamed on a launch
      return nullptr;
    }
    if (e != cudaSuccess) throw_cuda_error("cudaMalloc", e);
    return p;
  }
  void free(void* p) override {
    make_current();
    (void)cudaFree(p);  // after a sticky error this fails too; nothing to do about it
  }
  void* host_alloc(size_t bytes) override {
    make_current();
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (e != cudaSuccess) throw_cuda_error("cudaHostAlloc", e);
    return p;
  }
  void host_free(void* p) override { (void)cudaFreeHost(p); }
  MemInfo mem_info() override {
    make_current();
    MemInfo m;
    if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) (void)cudaGetLastError();
    return m;
  }

  StreamHandle create_stream() override {
    make_current();
    cudaStream_t s = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void destroy_stream(StreamHandle s) override { (void)cudaStreamDestroy(cudaStream_t(s)); }
  EventHandle create_event() override {
    make_current();
    cudaEvent_t e = nullptr;
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void destroy_event(EventHandle e) override { (void)cudaEventDestroy(cudaEvent_t(e)); }
  EventHandle create_timed_event() override {
    make_current();
    cudaEvent_t e = nullptr;
    TIDE_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  float elapsed_ms(EventHandle a, EventHandle b) override {
    make_current();
    float ms = 0;
    if (cudaEventElapsedTime(&ms, cudaEvent_t(a), cudaEvent_t(b)) != cudaSuccess) {
      (void)cudaGetLastError();  // not ready (or not recorded): not sticky
      return -1;
    }
    return ms;
  }
  void record(EventHandle e, StreamHandle s) override {
    make_current();
    TIDE_CUDA_CHECK(cudaEventRecord(cudaEvent_t(e), cudaStream_t(s)));
  }
  void wait(StreamHandle s, EventHandle e) override {
    make_current();
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(cudaStream_t(s), cudaEvent_t(e), 0));
  }

  void write_timeline(StreamHandle s, uint64_t* timeline, uint64_t value) override {
    make_current();
    // Mapped pinned memory: with unified addressing the host pointer is the device's.
    write_value<<<1, 1, 0, cudaStream_t(s)>>>(
        reinterpret_cast<volatile unsigned long long*>(timeline), value);
  }
  void write_words(StreamHandle s, uint64_t* dst, std::span<const uint64_t> values) override {
    if (values.size() > kMaxWords) throw Error("cuda", "write_words: more than kMaxWords values");
    if (values.empty()) return;
    make_current();
    Words w{};
    for (size_t i = 0; i < values.size(); ++i) w.v[i] = values[i];
    write_words_kernel<<<1, unsigned(kMaxWords), 0, cudaStream_t(s)>>>(
        reinterpret_cast<unsigned long long*>(dst), w, int(values.size()));
  }
  void memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind,
                    StreamHandle s) override {
    make_current();
    TIDE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), cudaStream_t(s)));
  }
  void launch_host(StreamHandle s, void (*fn)(void*), void* arg) override {
    make_current();
    TIDE_CUDA_CHECK(cudaLaunchHostFunc(cudaStream_t(s), fn, arg));
  }

  Status synchronize(StreamHandle s) override {
    make_current();
    return status_of(cudaStreamSynchronize(cudaStream_t(s)));
  }
  Status query(StreamHandle s) override {
    make_current();
    return status_of(cudaStreamQuery(cudaStream_t(s)));
  }
  Status last_error() override { return status_of(cudaGetLastError()); }

  // ---- graphs ----
  GraphHandle graph_create() override {
    make_current();
    cudaGraph_t g = nullptr;
    TIDE_CUDA_CHECK(cudaGraphCreate(&g, 0));
    return g;
  }
  void graph_destroy(GraphHandle g) override { (void)cudaGraphDestroy(cudaGraph_t(g)); }

  GraphNodeHandle graph_add_captured(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                     const std::function<void(StreamHandle)>& launch,
                                     std::string* why) override {
    make_current();
    // A private stream per capture: thread-local mode lets other threads keep launching
    // (and makes this thread's unsafe calls, such as cudaMalloc, fail the capture).
    cudaStream_t cs = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    struct StreamGone {
      cudaStream_t s;
      ~StreamGone() { (void)cudaStreamDestroy(s); }
    } gone{cs};
    TIDE_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t child = nullptr;
    try {
      launch(cs);
    } catch (...) {
      if (cudaStreamEndCapture(cs, &child) == cudaSuccess && child) cudaGraphDestroy(child);
      (void)cudaGetLastError();
      throw;
    }
    cudaError_t launched = cudaGetLastError();
    cudaError_t e = cudaStreamEndCapture(cs, &child);
    if (launched != cudaSuccess || e != cudaSuccess || !child) {
      cudaError_t bad = launched != cudaSuccess ? launched : e;
      if (child) cudaGraphDestroy(child);
      (void)cudaGetLastError();  // a refused capture is not sticky: leave no error behind
      if (why) *why = std::string(cudaGetErrorName(bad)) + ": " + cudaGetErrorString(bad);
      return nullptr;
    }
    struct ChildGone {
      cudaGraph_t g;
      ~ChildGone() { cudaGraphDestroy(g); }  // the node holds a copy
    } child_gone{child};
    // One kernel of tide's: its own kernel node, joined by programmatic edges.
    if (cudaGraphNode_t node = add_dependent_kernel(cudaGraph_t(g), deps, child)) return node;
    cudaGraphNode_t node = nullptr;
    e = cudaGraphAddChildGraphNode(&node, cudaGraph_t(g),
                                   reinterpret_cast<const cudaGraphNode_t*>(deps.data()),
                                   deps.size(), child);
    if (e != cudaSuccess) throw_cuda_error("cudaGraphAddChildGraphNode", e);
    return node;
  }

  void graph_add_dependencies(GraphHandle g, std::span<const GraphNodeHandle> from,
                              GraphNodeHandle to) override {
    if (from.empty()) return;
    make_current();
    const std::vector<cudaGraphNode_t> tos(from.size(), cudaGraphNode_t(to));
    const auto* froms = reinterpret_cast<const cudaGraphNode_t*>(from.data());
    TIDE_CUDA_CHECK(
        cudaGraphAddDependencies(cudaGraph_t(g), froms, tos.data(), nullptr, from.size()));
  }

  GraphNodeHandle graph_add_memcpy(GraphHandle g, std::span<const GraphNodeHandle> deps, void* dst,
                                   const void* src, size_t bytes, CopyKind kind) override {
    make_current();
    cudaGraphNode_t node = nullptr;
    TIDE_CUDA_CHECK(cudaGraphAddMemcpyNode1D(&node, cudaGraph_t(g),
                                             reinterpret_cast<const cudaGraphNode_t*>(deps.data()),
                                             deps.size(), dst, src, bytes, memcpy_kind(kind)));
    return node;
  }

  GraphExecHandle graph_instantiate(GraphHandle g, std::string* why) override {
    make_current();
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaGraphInstantiate(&exec, cudaGraph_t(g), 0);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
      return nullptr;
    }
    return exec;
  }

  bool graph_exec_update(GraphExecHandle exec, GraphHandle g) override {
    make_current();
    cudaGraphExecUpdateResultInfo info{};
    cudaError_t e = cudaGraphExecUpdate(cudaGraphExec_t(exec), cudaGraph_t(g), &info);
    if (e == cudaSuccess) return true;
    (void)cudaGetLastError();  // cudaErrorGraphExecUpdateFailure: the caller re-instantiates
    return false;
  }

  void graph_exec_set_memcpy(GraphExecHandle exec, GraphNodeHandle node, void* dst, const void* src,
                             size_t bytes, CopyKind kind) override {
    make_current();
    TIDE_CUDA_CHECK(cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t(exec), cudaGraphNode_t(node),
                                                       dst, src, bytes, memcpy_kind(kind)));
  }

  void graph_launch(GraphExecHandle exec, StreamHandle s) override {
    make_current();
    TIDE_CUDA_CHECK(cudaGraphLaunch(cudaGraphExec_t(exec), cudaStream_t(s)));
  }
  void graph_exec_destroy(GraphExecHandle exec) override {
    (void)cudaGraphExecDestroy(cudaGraphExec_t(exec));
  }
  size_t graph_node_count(GraphHandle g) override {
    size_t n = 0;
    TIDE_CUDA_CHECK(cudaGraphGetNodes(cudaGraph_t(g), nullptr, &n));
    return n;
  }

  bool graph_create_condition(GraphHandle g, ConditionalHandle* cond, std::string* why) override {
    make_current();
    return create_condition(cudaGraph_t(g), cond, why);
  }
  GraphNodeHandle graph_add_while(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                  ConditionalHandle cond, GraphHandle* body,
                                  std::string* why) override {
    make_current();
    cudaGraph_t b = nullptr;
    cudaGraphNode_t node = add_while_node(cudaGraph_t(g), deps, cond, &b, why);
    *body = b;
    return node;
  }
  GraphNodeHandle graph_add_loop_start(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                       const LoopConditions& conds, int64_t* counter,
                                       const LoopCount& count, std::span<const LoopCopy> copies,
                                       const LoopRandom* random) override {
    make_current();
    return add_loop_start_node(cudaGraph_t(g), deps, conds, counter, count, copies, random);
  }
  GraphNodeHandle graph_add_loop_step(GraphHandle body, std::span<const GraphNodeHandle> deps,
                                      ConditionalHandle cond, int64_t threshold, int64_t* counter,
                                      int64_t iterations, std::span<const LoopCopy> copies,
                                      const LoopRandom* random) override {
    make_current();
    return add_loop_step_node(cudaGraph_t(body), deps, cond, threshold, counter, iterations, copies,
                              random);
  }

  void* create_blas() override {
    make_current();
    cublasLtHandle_t h = nullptr;
    cublasStatus_t st = cublasLtCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw Error("cuda", std::string("cublasLtCreate failed: ") + cublasLtGetStatusString(st));
    return h;
  }
  void destroy_blas(void* h) override { cublasLtDestroy(cublasLtHandle_t(h)); }

 private:
  const int index_;
  std::string name_;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::shared_ptr<DeviceApi> make_cuda_api(int index, const char* op) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(op, std::string("cannot use cuda:") + std::to_string(index) +
                        ": no usable CUDA device (cudaGetDeviceCount: " + cudaGetErrorName(e) +
                        ": " + cudaGetErrorString(e) + ")");
  }
  if (index >= n)
    throw Error(op, "cannot use cuda:" + std::to_string(index) + ": this machine has " +
                        std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s"));
  return std::make_shared<CudaApi>(index);
}

}  // namespace tide::cuda
