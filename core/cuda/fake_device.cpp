#include "core/cuda/fake_device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tide::cuda {

struct FakeDevice::Event {
  std::atomic<uint64_t> issued{0};     // records made (at call time)
  std::atomic<uint64_t> completed{0};  // records the stream has reached
  std::atomic<int64_t> when_ns{0};     // host clock when the last record was reached
};

struct FakeDevice::Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  // A stream capturing into a graph node (fake_graph.cpp): its operations are kept here
  // instead of run; it has no thread.
  std::vector<std::function<void()>>* capture = nullptr;
  bool paused = false, stop = false, busy = false;
  std::atomic<uint64_t> executed{0};
  std::thread thread;

  void run(const std::atomic<bool>& dead) {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || (!paused && !ops.empty() && !dead.load()); });
      if (stop && (ops.empty() || paused || dead.load())) return;
      std::function<void()> op = std::move(ops.front());
      ops.pop_front();
      busy = true;
      lock.unlock();
      op();
      lock.lock();
      busy = false;
      executed.fetch_add(1);
      cv.notify_all();
    }
  }
  bool idle() const { return ops.empty() && !busy; }
};

FakeDevice::FakeDevice(size_t capacity, std::string name)
    : name_(std::move(name)), capacity_(capacity) {}

FakeDevice::~FakeDevice() {
  for (auto& s : streams_) {
    {
      std::lock_guard lock(s->mu);
      s->stop = true;
      s->paused = false;
    }
    s->cv.notify_all();
    if (s->thread.joinable()) s->thread.join();
  }
  for (auto& [p, n] : blocks_) std::free(p);
}

void FakeDevice::log(Call c) {
  std::lock_guard lock(mu_);
  calls_.push_back(c);
}

void FakeDevice::enqueue(StreamHandle s, std::function<void()> op) {
  auto* st = static_cast<Stream*>(s);
  {
    std::lock_guard lock(st->mu);
    if (st->capture) {
      st->capture->push_back(std::move(op));
      return;
    }
    st->ops.push_back(std::move(op));
  }
  st->cv.notify_all();
}

std::vector<std::function<void()>> FakeDevice::capture(
    const std::function<void(StreamHandle)>& launch) {
  std::vector<std::function<void()>> ops;
  Stream capturing;  // no thread: enqueue keeps its operations in `ops`
  capturing.capture = &ops;
  struct Capturing {
    Capturing() {
      tl_capturing = true;
      tl_invalidated_by = nullptr;
    }
    ~Capturing() { tl_capturing = false; }
  } on;
  launch(&capturing);
  return ops;
}

Status FakeDevice::sticky_status() const {
  return {Status::sticky, "cudaErrorIllegalAddress (fake): " + sticky_};
}

// ---- test controls --------------------------------------------------------------------

void FakeDevice::pause(StreamHandle s) {
  auto* st = static_cast<Stream*>(s);
  std::lock_guard lock(st->mu);
  st->paused = true;
}

void FakeDevice::resume(StreamHandle s) {
  auto* st = static_cast<Stream*>(s);
  {
    std::lock_guard lock(st->mu);
    st->paused = false;
  }
  st->cv.notify_all();
}

void FakeDevice::fail_next_launch(std::string message) {
  std::lock_guard lock(mu_);
  launch_error_ = std::move(message);
}

void FakeDevice::inject_sticky_error(std::string message) {
  {
    std::lock_guard lock(mu_);
    sticky_ = std::move(message);
  }
  dead_.store(true);
  for (auto& s : streams_) s->cv.notify_all();
}

std::vector<FakeDevice::Call> FakeDevice::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

size_t FakeDevice::count(CallKind k, StreamHandle s) const {
  std::lock_guard lock(mu_);
  return size_t(std::count_if(calls_.begin(), calls_.end(),
                              [&](const Call& c) { return c.kind == k && (!s || c.stream == s); }));
}

void FakeDevice::clear_calls() {
  std::lock_guard lock(mu_);
  calls_.clear();
}

uint64_t FakeDevice::executed(StreamHandle s) const {
  return static_cast<Stream*>(s)->executed.load();
}

// ---- memory ---------------------------------------------------------------------------

void* FakeDevice::malloc(size_t bytes) {
  log({CallKind::malloc, nullptr, nullptr, bytes});
  if (refused_in_capture("cudaMalloc"))
    throw Error("cuda",
                "cudaMalloc failed: cudaErrorStreamCaptureUnsupported (fake): an "
                "allocation while the thread captures a graph");
  if (dead_.load())  // as cudaMalloc after an asynchronous fault: the sticky error again
    throw Error("cuda", "cudaMalloc failed: " + sticky_status().message);
  size_t now = used_.load();
  do {
    if (now + bytes > capacity_) return nullptr;
  } while (!used_.compare_exchange_weak(now, now + bytes));
  void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (!p) {
    used_.fetch_sub(bytes);
    return nullptr;
  }
  std::lock_guard lock(mu_);
  blocks_.emplace_back(p, bytes);
  return p;
}

void FakeDevice::free(void* p) {
  if (!p) return;
  size_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](auto& b) { return b.first == p; });
    TIDE_ASSERT(it != blocks_.end(), "fake device: free of an unknown pointer");
    bytes = it->second;
    blocks_.erase(it);
    calls_.push_back({CallKind::free, nullptr, nullptr, bytes});
  }
  used_.fetch_sub(bytes);
  std::free(p);
}

void* FakeDevice::host_alloc(size_t bytes) {
  log({CallKind::host_alloc, nullptr, nullptr, bytes});
  if (refused_in_capture("cudaHostAlloc"))
    throw Error("cuda",
                "cudaHostAlloc failed: cudaErrorStreamCaptureUnsupported (fake): an "
                "allocation while the thread captures a graph");
  return std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
}

void FakeDevice::host_free(void* p) {
  log({CallKind::host_free, nullptr, nullptr, 0});
  std::free(p);
}

MemInfo FakeDevice::mem_info() { return {capacity_ - used_.load(), capacity_}; }

// ---- streams and events ---------------------------------------------------------------

StreamHandle FakeDevice::create_stream() {
  auto st = std::make_unique<Stream>();
  Stream* raw = st.get();
  raw->thread = std::thread([this, raw] { raw->run(dead_); });
  std::lock_guard lock(mu_);
  streams_.push_back(std::move(st));
  calls_.push_back({CallKind::create_stream, raw, nullptr, 0});
  return raw;
}

void FakeDevice::destroy_stream(StreamHandle s) {
  auto* st = static_cast<Stream*>(s);
  {
    std::lock_guard lock(st->mu);
    st->stop = true;
  }
  st->cv.notify_all();
  if (st->thread.joinable()) st->thread.join();
}

EventHandle FakeDevice::create_event() {
  std::lock_guard lock(mu_);
  events_.push_back(std::make_unique<Event>());
  return events_.back().get();
}

void FakeDevice::destroy_event(EventHandle) {}  // events live as long as the fake

float FakeDevice::elapsed_ms(EventHandle a, EventHandle b) {
  auto* x = static_cast<Event*>(a);
  auto* y = static_cast<Event*>(b);
  if (x->completed.load() < x->issued.load() || y->completed.load() < y->issued.load()) return -1;
  return float(double(y->when_ns.load() - x->when_ns.load()) / 1e6);
}

void FakeDevice::record(EventHandle e, StreamHandle s) {
  auto* ev = static_cast<Event*>(e);
  uint64_t gen = ev->issued.fetch_add(1) + 1;
  log({CallKind::record, s, e, 0});
  enqueue(s, [ev, gen] {
    ev->when_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count());
    uint64_t c = ev->completed.load();
    while (c < gen && !ev->completed.compare_exchange_weak(c, gen)) {
    }
  });
}

void FakeDevice::wait(StreamHandle s, EventHandle e) {
  auto* ev = static_cast<Event*>(e);
  uint64_t gen = ev->issued.load();  // the most recent record before this call
  log({CallKind::wait, s, e, 0});
  enqueue(s, [this, ev, gen] {
    while (ev->completed.load() < gen && !dead_.load()) std::this_thread::yield();
  });
}

// ---- work -----------------------------------------------------------------------------

void FakeDevice::write_timeline(StreamHandle s, uint64_t* timeline, uint64_t value) {
  log({CallKind::write_timeline, s, nullptr, 0});
  enqueue(s, [timeline, value] { __atomic_store_n(timeline, value, __ATOMIC_RELEASE); });
}

void FakeDevice::write_words(StreamHandle s, uint64_t* dst, std::span<const uint64_t> values) {
  TIDE_ASSERT(values.size() <= kMaxWords, "fake device: write_words takes at most kMaxWords");
  log({CallKind::write_words, s, nullptr, values.size() * sizeof(uint64_t)});
  enqueue(s, [dst, v = std::vector<uint64_t>(values.begin(), values.end())] {
    std::copy(v.begin(), v.end(), dst);
  });
}

void FakeDevice::memcpy_async(void* dst, const void* src, size_t bytes, CopyKind, StreamHandle s) {
  log({CallKind::memcpy, s, nullptr, bytes});
  enqueue(s, [dst, src, bytes] {
    if (bytes) std::memcpy(dst, src, bytes);
  });
}

void FakeDevice::launch_host(StreamHandle s, void (*fn)(void*), void* arg) {
  log({CallKind::launch_host, s, nullptr, 0});
  enqueue(s, [fn, arg] { fn(arg); });
}

// ---- completion and errors ------------------------------------------------------------

Status FakeDevice::synchronize(StreamHandle s) {
  log({CallKind::synchronize, s, nullptr, 0});
  if (refused_in_capture("cudaStreamSynchronize"))
    return {Status::error,
            "cudaErrorStreamCaptureUnsupported (fake): a synchronisation while the thread "
            "captures a graph"};
  auto* st = static_cast<Stream*>(s);
  std::unique_lock lock(st->mu);
  st->cv.wait(lock, [&] { return st->idle() || dead_.load(); });
  if (dead_.load()) return sticky_status();
  return {};
}

void* FakeDevice::create_blas() {
  log({CallKind::create_blas, nullptr, nullptr, 0});
  if (refused_in_capture("cublasLtCreate"))
    throw Error("cuda",
                "cublasLtCreate failed: cudaErrorStreamCaptureUnsupported (fake): a library "
                "handle created while the thread captures a graph");
  return nullptr;  // no cuBLASLt: matmuls run the host kernels
}

bool FakeDevice::refused_in_capture(const char* call) {
  if (!tl_capturing) return false;
  if (!tl_invalidated_by) tl_invalidated_by = call;
  return true;
}

Status FakeDevice::query(StreamHandle s) {
  if (dead_.load()) return sticky_status();
  auto* st = static_cast<Stream*>(s);
  std::lock_guard lock(st->mu);
  return st->idle() ? Status{} : Status{Status::not_ready, "not ready"};
}

Status FakeDevice::last_error() {
  if (dead_.load()) return sticky_status();
  std::lock_guard lock(mu_);
  if (launch_error_.empty()) return {};
  Status st{Status::error, "cudaErrorLaunchFailure (fake): " + launch_error_};
  launch_error_.clear();
  return st;
}

}  // namespace tide::cuda
