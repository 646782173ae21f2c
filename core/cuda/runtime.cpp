#include "core/cuda/runtime.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cuda/cuda_stream.h"
#include "core/cuda/fake_device.h"
#include "core/engine/engine_impl.h"
#include "core/engine/failure.h"
#include "core/error.h"
#include "core/segment_source.h"

namespace tide::cuda {

#if defined(TIDE_WITH_CUDA)
// core/cuda/cuda_api.cu: the real device, or throws "[op] ..." naming why there is none.
std::shared_ptr<DeviceApi> make_cuda_api(int index, const char* op);
int cuda_device_count();
#endif

namespace {

using tide::detail::kMaxGpus;

std::mutex g_mu;  // creation and installation
std::array<std::atomic<DeviceRuntime*>, kMaxGpus> g_runtimes{};
std::array<std::shared_ptr<DeviceApi>, kMaxGpus> g_installed;

void collect_gpu_spans(std::vector<profiler::GpuSpan>& out);  // the profiler's source

class DeviceSource final : public BlockSource {
 public:
  DeviceSource(DeviceRuntime& rt, Device d) : rt_(rt), api_(rt.api()), device_(d) {}
  // A failed device refuses new blocks with the device's failure (cudaMalloc would only
  // repeat the sticky error); a sticky error found here fails the device the same way.
  void* allocate(size_t bytes) override {
    rt_.check_usable("alloc");
    try {
      return api_.malloc(bytes);
    } catch (const Error&) {
      Status st = api_.last_error();
      if (st.kind != Status::sticky) throw;
      rt_.fail(st, "cudaMalloc");
      rt_.check_usable("alloc");
      throw;
    }
  }
  void release(void* p, size_t) override { api_.free(p); }
  std::string describe() override {
    MemInfo m = api_.mem_info();
    return tide::detail::concat(device_.str(), " has ", m.free, " bytes free of ", m.total);
  }
  size_t capacity() override { return api_.mem_info().total; }

 private:
  DeviceRuntime& rt_;
  DeviceApi& api_;
  Device device_;
};

class PinnedSource final : public BlockSource {
 public:
  explicit PinnedSource(DeviceApi& api) : api_(api) {}
  void* allocate(size_t bytes) override { return api_.host_alloc(bytes); }
  void release(void* p, size_t) override { api_.host_free(p); }

 private:
  DeviceApi& api_;
};

// TIDE_FAKE_GPUS=N: cuda:0 .. cuda:N-1 are recording fakes (core/cuda/fake_device.h) that
// run the CPU kernels in stream order, so the GPU code paths (streams, events, staging,
// the CLI's --device) run end to end on a machine without a GPU. For tests only: a fake
// is as fast as the CPU and says so in its name.
int fake_gpus_from_env() {
  static const int n = [] {
    const char* v = std::getenv("TIDE_FAKE_GPUS");
    if (!v || !*v) return 0;
    char* end = nullptr;
    long k = std::strtol(v, &end, 10);
    TIDE_CHECK(*end == 0 && k >= 0 && k <= kMaxGpus, "cuda",
               "TIDE_FAKE_GPUS must be a number "
               "of fake GPUs from 0 to ",
               kMaxGpus, ", got '", v, "'");
    return int(k);
  }();
  return n;
}

// An environment switch: unset or empty gives `fallback`; otherwise it must be 0 or 1
// ("[cuda] NAME must be 0 (what 0 means) or 1 (what 1 means), got '...'").
bool env_switch(const char* name, bool fallback, const char* zero, const char* one) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  TIDE_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, "cuda", name, " must be 0 (",
             zero, ") or 1 (", one, "), got '", v, "'");
  return v[0] == '1';
}

// TIDE_CUDA_SEGMENTS=0: every block gets its own cudaMalloc / cudaHostAlloc instead of a
// place in a shared segment (core/segment_source.h). For compute-sanitizer: memcheck sees
// an overrun only at an allocation's bounds. Read when a device is first used.
bool segments_from_env() {
  return env_switch("TIDE_CUDA_SEGMENTS", true, "a cudaMalloc per block", "segments, the default");
}

// TIDE_CUDA_PDL=0: ordinary edges between tide's kernels in CUDA graphs instead of the
// default programmatic ones (a graph node cost 0.74 us with them against 0.98-1.17 us
// without on H200s, bench/RESULTS.md 2026-11-27). Read on first use.
bool programmatic_edges_from_env() {
  return env_switch("TIDE_CUDA_PDL", true, "ordinary edges",
                    "programmatic edges between tide's kernels, the default");
}
std::atomic<int> g_programmatic{-1};  // -1: not read yet
std::atomic<uint64_t> g_programmatic_edges{0};

std::unique_ptr<BlockSource> in_segments(std::unique_ptr<BlockSource> s, bool segments) {
  if (!segments) return s;
  return std::make_unique<SegmentSource>(std::move(s));
}

void check_index(int index, const char* op) {
  TIDE_CHECK(index >= 0 && index < kMaxGpus, op, "no device cuda:", index, " (at most ", kMaxGpus,
             " GPUs)");
}

}  // namespace

bool programmatic_edges_enabled() {
  int v = g_programmatic.load(std::memory_order_relaxed);
  if (v < 0) {
    v = programmatic_edges_from_env() ? 1 : 0;
    int unset = -1;
    g_programmatic.compare_exchange_strong(unset, v);
    v = g_programmatic.load(std::memory_order_relaxed);
  }
  return v == 1;
}
void set_programmatic_edges_enabled(bool on) { g_programmatic.store(on ? 1 : 0); }
namespace {
thread_local bool t_ordinary_edges_only = false;
}
bool programmatic_edges_wanted() { return !t_ordinary_edges_only && programmatic_edges_enabled(); }
OrdinaryEdgesOnly::OrdinaryEdgesOnly() : before_(t_ordinary_edges_only) {
  t_ordinary_edges_only = true;
}
OrdinaryEdgesOnly::~OrdinaryEdgesOnly() { t_ordinary_edges_only = before_; }
namespace {
thread_local uint64_t t_programmatic_edges = 0;
}
uint64_t programmatic_edges_added() { return g_programmatic_edges.load(); }
uint64_t programmatic_edges_added_here() { return t_programmatic_edges; }
void note_programmatic_edges(uint64_t n) {
  g_programmatic_edges.fetch_add(n);
  t_programmatic_edges += n;
}

// ---- the registry ----------------------------------------------------------------------

DeviceRuntime& DeviceRuntime::get(int index, const char* op) {
  check_index(index, op);
  if (DeviceRuntime* r = g_runtimes[size_t(index)].load(std::memory_order_acquire)) [[likely]]
    return *r;
  std::lock_guard lock(g_mu);
  if (DeviceRuntime* r = g_runtimes[size_t(index)].load(std::memory_order_acquire)) return *r;
  std::shared_ptr<DeviceApi> api = g_installed[size_t(index)];
  if (!api && index < fake_gpus_from_env())
    api = std::make_shared<FakeDevice>(size_t(1) << 34, "fake GPU (TIDE_FAKE_GPUS)");
  if (!api) {
#if defined(TIDE_WITH_CUDA)
    api = make_cuda_api(index, op);
#else
    throw Error(op, tide::detail::concat("cannot use cuda:", index,
                                         ": this build of tide has no CUDA backend (configure "
                                         "with -DTIDE_CUDA=ON where the CUDA toolkit is)"));
#endif
  }
  auto* r = new DeviceRuntime(index, std::move(api));  // lives as long as the process
  g_runtimes[size_t(index)].store(r, std::memory_order_release);
  return *r;
}

void install_device(int index, std::shared_ptr<DeviceApi> api) {
  check_index(index, "cuda");
  std::lock_guard lock(g_mu);
  TIDE_CHECK(!g_runtimes[size_t(index)].load(), "cuda", "cuda:", index,
             " is already in use; install a device before its first use");
  g_installed[size_t(index)] = std::move(api);
}

int device_count() {
#if defined(TIDE_WITH_CUDA)
  static const int n = cuda_device_count();  // asked once: the driver's answer does not change
  return n;
#else
  return 0;
#endif
}

bool available(int index) {
  if (index < 0 || index >= kMaxGpus) return false;
  if (index < fake_gpus_from_env()) return true;
  {
    std::lock_guard lock(g_mu);
    if (g_runtimes[size_t(index)].load() || g_installed[size_t(index)]) return true;
  }
  return index < device_count();
}

// ---- a device ----------------------------------------------------------------------------

DeviceRuntime::DeviceRuntime(int index, std::shared_ptr<DeviceApi> api)
    : index_(index), api_(std::move(api)) {
  // Small blocks come out of segments (core/segment_source.h): one cudaMalloc or
  // cudaHostAlloc per tiny tensor would cost the frontend microseconds each.
  const bool segments = segments_from_env();
  allocator_ = std::make_unique<Allocator>(
      device(), in_segments(std::make_unique<DeviceSource>(*this, device()), segments),
      device().str());
  pinned_ = std::make_unique<Allocator>(
      Device::cpu(), in_segments(std::make_unique<PinnedSource>(*api_), segments),
      "pinned host memory of " + device().str());
  profiler::detail::set_gpu_span_source(&collect_gpu_spans);
  // At exit, finish GPU work while the CUDA runtime still stands: its own exit handler was
  // registered when it started (before this), so this one runs first. Without it the
  // engine's exit handler would wait on timelines in memory the runtime already freed.
  static const bool drain_at_exit =
      (std::atexit([] { Engine::get().shutdown(ShutdownMode::drain); }), true);
  (void)drain_at_exit;
}

Failure* DeviceRuntime::failure() const {
  return tide::detail::g_gpu_failure[size_t(index_)].load(std::memory_order_acquire);
}

void DeviceRuntime::check_usable(const char* op) const {
  if (Failure* f = failure()) [[unlikely]]
    throw Error(op,
                "cannot queue work on " + device().str() + ", which failed earlier: " + f->what());
}

void DeviceRuntime::add_stream(CudaStream* s) {
  std::lock_guard lock(mu_);
  streams_.push_back(s);
}

void DeviceRuntime::remove_stream(CudaStream* s) {
  std::lock_guard lock(mu_);
  std::erase(streams_, s);
}

void DeviceRuntime::collect_spans(std::vector<profiler::GpuSpan>& out) {
  std::lock_guard lock(mu_);
  for (CudaStream* s : streams_) s->collect_spans(out);
}

namespace {
void collect_gpu_spans(std::vector<profiler::GpuSpan>& out) {
  for (auto& r : g_runtimes)
    if (DeviceRuntime* rt = r.load(std::memory_order_acquire)) rt->collect_spans(out);
}
}  // namespace

void DeviceRuntime::fail(const Status& st, const char* where) {
  std::lock_guard lock(mu_);
  if (failure()) return;
  // The ops that may have caused it: launched on this device and not complete.
  uint64_t in_flight = 0;
  const char* first_op = nullptr;
  tide::SourceLocation first_site;
  uint64_t first_order = UINT64_MAX;
  for (CudaStream* s : streams_) {
    uint64_t done = s->owner().completed.load(std::memory_order_acquire);
    uint64_t issued = s->owner().issued.load(std::memory_order_acquire);
    if (issued <= done) continue;
    in_flight += issued - done;
    const char* op = nullptr;
    tide::SourceLocation site;
    uint64_t order = 0;
    if (s->launched_op(done + 1, &op, &site, &order) && order < first_order) {
      first_op = op;
      first_site = site;
      first_order = order;
    }
  }
  std::string msg = tide::detail::concat(
      device().str(), " failed: ", st.message, " (found at ", where, "). An asynchronous ",
      "error surfaces after the op that caused it: one of the ", in_flight, " ops launched on ",
      device().str(), " and not complete caused it",
      first_op ? tide::detail::concat(", the first of them '", first_op, "'") : std::string(),
      ". Run with TIDE_ENGINE=sync to stop at the failing op. Later work on ", device().str(),
      " is refused; the CPU keeps working");
  Failure* f = Failure::create(first_op ? first_op : "cuda", msg, first_site);
  tide::detail::g_gpu_failure[size_t(index_)].store(f, std::memory_order_release);
  if (!streams_.empty()) streams_.front()->owner().eng->record_failure(f);
  for (CudaStream* s : streams_) s->abandon();
}

void DeviceRuntime::copy_to_host(void* dst, const void* src, size_t bytes, const char* op) {
  if (bytes == 0) return;
  StorageRef staging = pinned_->allocate(bytes, op);
  Status st;
  {
    std::lock_guard lock(mu_);
    if (!copy_stream_) copy_stream_ = api_->create_stream();
    api_->memcpy_async(staging->data(), src, bytes, CopyKind::device_to_host, copy_stream_);
    st = api_->synchronize(copy_stream_);
  }
  if (st.kind == Status::sticky) fail(st, op);
  if (st.failed()) throw Error(op, "copy from " + device().str() + " failed: " + st.message);
  std::memcpy(dst, staging->data(), bytes);
}

// ---- hooks for the engine, the allocator and the ops --------------------------------------

std::unique_ptr<DeviceStream> make_stream(StreamImpl& owner) {
  DeviceRuntime& rt = DeviceRuntime::get(owner.device.index, "stream");
  return std::make_unique<CudaStream>(owner, rt);
}

Allocator& device_allocator(Device d) {
  TIDE_CHECK(d.is_cuda(), "alloc", "no allocator for device ", d.str());
  return DeviceRuntime::get(d.index, "alloc").allocator();
}

bool runs_host_kernels(int index) {
  if (index < 0 || index >= kMaxGpus) return false;
  if (DeviceRuntime* r = g_runtimes[size_t(index)].load(std::memory_order_acquire)) [[likely]]
    return r->api().runs_host_kernels();
  return available(index) && DeviceRuntime::get(index).api().runs_host_kernels();
}

namespace {
void run_host_function(void* p) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(p));
  (*fn)();
}

void run_kept_function(void* p) { (*static_cast<std::function<void()>*>(p))(); }
}  // namespace

void launch_host(const KernelContext& ctx, std::function<void()> fn) {
  if (HostFunctions* keep = ctx.host_functions) {
    keep->fns.push_back(std::make_unique<std::function<void()>>(std::move(fn)));
    ctx.api->launch_host(ctx.stream, &run_kept_function, keep->fns.back().get());
    return;
  }
  auto* p = new std::function<void()>(std::move(fn));
  ctx.api->launch_host(ctx.stream, &run_host_function, p);
}

}  // namespace tide::cuda
