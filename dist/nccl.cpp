// The NCCL backend (built with CUDA when nccl.h was found): NcclCommunicator, NCCL loaded
// with dlopen on first use (as cuBLASLt is: CPU-only runs of a CUDA build never load it),
// and nccl_world(). Host-side exchanges (NCCL's id, the agreement, barriers) go over the
// MPI world group's communicator, or a 1-rank stand-in in a build without MPI.
#include "dist/nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "core/cuda/call_name.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/shared_library.h"
#include "dist/mpi.h"
#include "dist/watchdog.h"

namespace tide::dist {
namespace {

// The NCCL entry points tide calls, looked up once.
struct Nccl {
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*CommAbort)(ncclComm_t);
};

template <class F>
void bind(void* lib, F& f, const char* name) {
  tide::detail::bind_symbol(lib, f, name, "NCCL", "dist");
}

Nccl load() {
  void* lib = tide::detail::load_library(
      {"libnccl.so.2", "libnccl.so"}, "NCCL", "dist",
      "it comes with the CUDA toolkit, add its lib directory to LD_LIBRARY_PATH");
  Nccl n{};
  bind(lib, n.GetVersion, "ncclGetVersion");
  bind(lib, n.GetUniqueId, "ncclGetUniqueId");
  bind(lib, n.CommInitRank, "ncclCommInitRank");
  bind(lib, n.AllReduce, "ncclAllReduce");
  bind(lib, n.Broadcast, "ncclBroadcast");
  bind(lib, n.GetErrorString, "ncclGetErrorString");
  bind(lib, n.GetLastError, "ncclGetLastError");
  bind(lib, n.CommGetAsyncError, "ncclCommGetAsyncError");
  bind(lib, n.CommAbort, "ncclCommAbort");
  return n;  // the library stays loaded for the process
}

const Nccl& nccl() {
  static const Nccl n = load();  // a failed load throws and is retried on the next call
  return n;
}

void check(ncclResult_t r, ncclComm_t comm, const char* call, const char* op) {
  if (r == ncclSuccess) [[likely]]
    return;
  std::string msg = cuda::library_error(call, {}, nccl().GetErrorString(r));
  const char* last = comm ? nccl().GetLastError(comm) : nullptr;
  if (last && *last) msg += std::string(" (") + last + ")";
  throw Error(op, msg);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::float32: return ncclFloat32;
    case DType::float64: return ncclFloat64;
    case DType::int32: return ncclInt32;
    case DType::int64: return ncclInt64;
    // For broadcast: all_reduce refuses the 16-bit types at the call.
    case DType::bfloat16: return ncclBfloat16;
    case DType::float16: return ncclFloat16;
  }
  return ncclFloat32;
}

// The host side of a 1-rank job in a build without MPI: nothing to exchange.
class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "self"; }
  void all_reduce(void*, int64_t, DType, ReduceOp, void*, const char*) override {}
  void broadcast(void*, int64_t, DType, int, void*, const char*) override {}
  void barrier(const char*) override {}
  void all_gather(std::span<const int64_t> in, std::span<int64_t> out, const char*) override {
    std::copy(in.begin(), in.end(), out.begin());
  }
};

// The world communicator's watchdog (dist/watchdog.h): its completions are marked from host
// functions on the communication stream, which take the ticket as their argument.
CollectiveWatchdog* g_watchdog = nullptr;
void CUDART_CB mark_done(void* ticket) { g_watchdog->done(uint64_t(uintptr_t(ticket))); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, Communicator& host, Device device)
      : comm_(comm),
        host_(host),
        device_(device),
        watchdog_(host.rank(), CollectiveWatchdog::timeout_from_env()) {
    g_watchdog = &watchdog_;
    // Polls for late collectives and NCCL's asynchronous errors; it aborts the communicator
    // (which ends this rank's waiting kernels, so a host wait returns) and stops. Detached:
    // the world communicator lives until exit.
    std::thread([this] { watch(); }).detach();
  }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return device_; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp red, void* stream,
                  const char* op) override {
    check(nccl().AllReduce(data, data, size_t(count), nccl_type(dtype),
                           red == ReduceOp::average ? ncclAvg : ncclSum, comm_,
                           static_cast<cudaStream_t>(stream)),
          comm_, "ncclAllReduce", op);
    watch_completion(static_cast<cudaStream_t>(stream), "all_reduce");
  }
  void broadcast(void* data, int64_t count, DType dtype, int root, void* stream,
                 const char* op) override {
    check(nccl().Broadcast(data, data, size_t(count), nccl_type(dtype), root, comm_,
                           static_cast<cudaStream_t>(stream)),
          comm_, "ncclBroadcast", op);
    watch_completion(static_cast<cudaStream_t>(stream), "broadcast");
  }
  void barrier(const char* op) override { host_.barrier(op); }
  void all_gather(std::span<const int64_t> in, std::span<int64_t> out, const char* op) override {
    host_.all_gather(in, out, op);
  }
  // An asynchronous error (a failed kernel, a peer gone) or a collective past
  // TIDE_NCCL_TIMEOUT leaves this rank's and the others' NCCL kernels waiting for ever: the
  // communicator is aborted, which ends them, and this and every later call say why.
  void check_health(const char* op) override {
    std::string why = async_error();
    if (!why.empty()) abort_with(why);
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.empty()) throw Error(op, aborted_);
  }

 private:
  // The message of NCCL's asynchronous error, "" while there is none.
  std::string async_error() {
    ncclResult_t async = ncclSuccess;
    if (nccl().CommGetAsyncError(comm_, &async) != ncclSuccess) return "";
    if (async == ncclSuccess || async == ncclInProgress) return "";
    return std::string("NCCL reported an asynchronous error on rank ") + std::to_string(rank()) +
           " (" + nccl().GetErrorString(async) +
           "); the communicator was aborted (ncclCommAbort), make a new group to go on";
  }
  // Aborts the communicator once, keeping why; reports it on stderr too, since the call
  // that fails next may be long after.
  void abort_with(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.empty()) return;
    aborted_ = why;
    std::fprintf(stderr, "tide [dist]: %s\n", why.c_str());
    (void)nccl().CommAbort(comm_);
  }
  // A deadline for the collective just queued on s, and a host function after it that marks
  // it done. Not inside a CUDA graph's capture (a replay would run the host function without
  // a deadline): there only the asynchronous errors are watched.
  void watch_completion(cudaStream_t s, const char* op) {
    if (watchdog_.timeout().count() == 0) return;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &capturing) != cudaSuccess ||
        capturing != cudaStreamCaptureStatusNone)
      return;
    const uint64_t ticket = watchdog_.queued(op, CollectiveWatchdog::Clock::now());
    if (cudaLaunchHostFunc(s, mark_done, reinterpret_cast<void*>(uintptr_t(ticket))) != cudaSuccess)
      watchdog_.done(ticket);  // the stream failed: the error surfaces there, not as a timeout
  }
  void watch() {
    const auto period =
        std::chrono::milliseconds(std::clamp<int64_t>(watchdog_.timeout().count() / 4, 100, 1000));
    for (;;) {
      std::this_thread::sleep_for(period);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!aborted_.empty()) return;
      }
      std::string why = watchdog_.check(CollectiveWatchdog::Clock::now());
      if (why.empty()) why = async_error();
      if (!why.empty()) {
        abort_with(why);
        return;
      }
    }
  }

  std::mutex mu_;
  std::string aborted_;  // why the communicator was aborted ("" while it works); under mu_
  ncclComm_t comm_;      // never destroyed: the world group lives until exit
  Communicator& host_;
  Device device_;
  CollectiveWatchdog watchdog_;
};

// The launcher's local rank (ranks on this machine), 0 without a launcher.
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

ProcessGroup* g_nccl_world = nullptr;

// At exit, before MPI is finalised (registered after mpi_world's handler, so run first):
// the group's queued collectives are launched and done.
void drain_at_exit() { g_nccl_world->stream().synchronize(); }

ProcessGroup* make_world(int device) {
  Communicator* host = nullptr;
  if (mpi_available()) {
    host = &mpi_world().communicator();
  } else {
    TIDE_CHECK(launched_by_mpirun().empty(), "dist",
               "tide was built without MPI, which NCCL needs to find the other ranks (started "
               "by mpirun: ",
               launched_by_mpirun(), ")");
    static SelfCommunicator self;
    host = &self;
  }
  if (device < 0) {
    const int gpus = cuda::device_count();
    TIDE_CHECK(gpus > 0, "dist", "NCCL needs a GPU and this machine has none");
    device = local_rank() % gpus;
  }
  cuda::DeviceRuntime& rt = cuda::DeviceRuntime::get(device, "dist");
  TIDE_CHECK(!rt.api().runs_host_kernels(), "dist", "NCCL needs a real GPU; cuda:", device, " is ",
             rt.api().name());
  rt.api().make_current();  // ncclCommInitRank binds the communicator to the current GPU

  ncclUniqueId id{};
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
  if (host->rank() == 0) check(nccl().GetUniqueId(&id), nullptr, "ncclGetUniqueId", "dist");
  int64_t words[sizeof(ncclUniqueId) / sizeof(int64_t)];
  std::memcpy(words, &id, sizeof id);
  host->broadcast(words, int64_t(std::size(words)), DType::int64, 0, nullptr, "dist");
  std::memcpy(&id, words, sizeof id);
  ncclComm_t comm = nullptr;
  check(nccl().CommInitRank(&comm, host->size(), id, host->rank()), nullptr, "ncclCommInitRank",
        "dist");
  auto* world =
      new ProcessGroup(std::make_unique<NcclCommunicator>(comm, *host, Device::cuda(device)));
  g_nccl_world = world;  // lives until exit: collectives may be queued until then
  std::atexit(drain_at_exit);
  return world;
}

}  // namespace

bool nccl_available() { return true; }

ProcessGroup& nccl_world(int device) {
  static ProcessGroup* world = make_world(device);  // once, even with racing callers
  return *world;
}

}  // namespace tide::dist
