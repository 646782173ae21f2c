#include "core/allocator.h"

#include <sys/sysinfo.h>

#include <bit>
#include <chrono>
#include <cstdlib>
#include <new>

#include "core/cuda/runtime.h"
#include "core/engine/capture.h"
#include "core/engine/engine_impl.h"
#include "core/engine/failure.h"
#include "core/engine/object_pool.h"
#include "core/error.h"

namespace tide {

// Deferred storages are made per op output on the frontend and mostly released there
// (reclaim): a per-thread free list instead of malloc/free each time.
using StorageObjects = detail::BlockCache<sizeof(Storage), alignof(Storage)>;

namespace {
constexpr size_t kMinBlock = 64;
constexpr size_t kAlign = 64;

// Four classes per power of two: 64, 80, 96, 112, 128, 160, ... (waste < 25 %).
int size_class(size_t bytes) {
  if (bytes <= kMinBlock) return 0;
  int p = std::bit_width(bytes - 1) - 1;  // 2^p < bytes <= 2^(p+1)
  size_t base = size_t(1) << p, step = base / 4;
  int q = int((bytes - base + step - 1) / step);  // 1..4
  return (p - 6) * 4 + q;
}
size_t class_bytes(int c) {
  if (c == 0) return kMinBlock;
  int p = (c - 1) / 4 + 6, q = (c - 1) % 4 + 1;
  size_t base = size_t(1) << p;
  return base + q * (base / 4);
}

// The C heap. aligned_alloc needs a size that is a multiple of the alignment (sanitizers
// abort otherwise); classes such as 80 or 160 bytes are not.
class HeapSource final : public BlockSource {
 public:
  void* allocate(size_t bytes) override {
    return std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  }
  void release(void* p, size_t) override { std::free(p); }
  size_t capacity() override {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return 0;
    return size_t(si.totalram + si.totalswap) * si.mem_unit;
  }
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A position some unfinished work on a stream other than `self` may still be at.
bool pending_elsewhere(StreamPos p, const StreamImpl* self) {
  return p.stream && p.stream != self && !p.stream->is_complete(p.seq);
}
// Whether a cached block may serve an allocation for stream `self` now: every stream that
// used it is `self` (FIFO orders the new use after the old) or has passed its last use.
bool reusable(const Storage* s, const StreamImpl* self) {
  const HazardState& h = s->hazard;
  if (pending_elsewhere(h.last_write, self)) return false;
  for (int i = 0; i < h.num_readers; ++i)
    if (pending_elsewhere(h.readers[i], self)) return false;
  return true;
}
}  // namespace

// Adds d to a counter only written under mu_ (readers load it without the lock).
template <class T, class D>
void bump(std::atomic<T>& c, D d) {
  c.store(T(c.load(std::memory_order_relaxed) + T(d)), std::memory_order_relaxed);
}

size_t Allocator::round_size(size_t bytes) { return class_bytes(size_class(bytes)); }

void Storage::poison(Failure* f) {
  Failure* expected = nullptr;
  f->retain();
  if (!failure_.compare_exchange_strong(expected, f, std::memory_order_acq_rel)) f->release();
}

void Storage::replace_failure(Failure* f) {
  if (f) f->retain();
  if (Failure* old = failure_.exchange(f, std::memory_order_acq_rel)) old->release();
}

void Storage::release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (is_slot() || is_deferred()) {
    if (Failure* f = failure_.load(std::memory_order_acquire)) f->release();
    if (Storage* b = owned_.load(std::memory_order_acquire)) {
      // The engine tracked the users on this storage, not on its block: hand them over,
      // so that a GPU block is not reused on another stream before they passed it.
      if (is_deferred()) b->hazard = hazard;
      b->release();
    }
    if (is_deferred()) {  // one per op output: recycled, not freed (allocate_deferred)
      if (memory::detail::on()) [[unlikely]]
        memory::detail::on_deferred_gone(this);
      this->~Storage();
      StorageObjects::give(this);
    } else {
      delete this;
    }
    return;
  }
  owner_->free_block(this);
}

bool Storage::running_a_task() { return detail::tl_running_task.stream != nullptr; }

void* Storage::materialize(const char* op, bool may_wait) const {
  if (Storage* b = owned_.load(std::memory_order_acquire)) {
    void* p = b->data();
    data_.store(p, std::memory_order_relaxed);
    return p;
  }
  if (!op) op = "alloc";
  StorageRef block =
      may_wait ? owner_->allocate_block(requested_, op)
               : owner_->allocate_now(requested_, op, " for an output allocated at execution", true,
                                      false);
  Storage* expected = nullptr;
  Storage* b = block.get();
  if (owned_.compare_exchange_strong(expected, b, std::memory_order_acq_rel))
    block.take();     // ours now; released with this storage
  else b = expected;  // another thread won: ours goes back to the cache
  void* p = b->data();
  data_.store(p, std::memory_order_relaxed);
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_materialized(this, b);
  return p;
}

void Storage::reset_for_reuse() {
  if (failure_.load(std::memory_order_relaxed))
    if (Failure* f = failure_.exchange(nullptr, std::memory_order_acq_rel)) f->release();
  // Field by field: `hazard = HazardState{}` zeroed all of it with rep stos, a microcoded
  // loop that was most of this function's time on the enqueue path. Readers past
  // num_readers are never read.
  hazard.last_write = {};
  hazard.num_readers = 0;
  hazard.queued_refs = 0;
  hazard.queued_bytes = 0;
  refs_.store(1, std::memory_order_relaxed);
}

Allocator::Allocator(Device device, std::unique_ptr<BlockSource> source, std::string name)
    : device_(device),
      source_(std::move(source)),
      name_(std::move(name)),
      tagged_(device.is_cuda()) {}

Allocator& Allocator::cpu() {
  // Never destroyed: storages may be released during static destruction.
  static Allocator* a = new Allocator(Device::cpu(), std::make_unique<HeapSource>(), "cpu");
  return *a;
}

Allocator& Allocator::get_other(Device d) { return cuda::device_allocator(d); }

Allocator::~Allocator() { empty_cache(); }

Storage* Allocator::try_take(size_t bytes, bool* fits) {
  int c = size_class(bytes);
  size_t cap = class_bytes(c);
  size_t limit = limit_.load(std::memory_order_relaxed);
  const StreamImpl* self = tagged_ && stream_of_ ? stream_of_(device_) : nullptr;
  std::vector<Storage*> flushed;
  Storage* s = nullptr;
  size_t active = 0;
  {
    std::lock_guard<SpinLock> lock(mu_);
    active = active_.load(std::memory_order_relaxed);
    if (limit && active + cap > limit) {
      *fits = false;
      return nullptr;
    }
    std::vector<Storage*>& list = cache_[c];
    for (size_t i = list.size(); i-- > 0;) {  // newest first: the warmest block
      if (tagged_ && !reusable(list[i], self)) continue;
      s = list[i];
      list.erase(list.begin() + std::ptrdiff_t(i));
      bump(cached_, -cap);
      s->reset_for_reuse();
      break;
    }
    if (!s) {
      // A new block would take the reservation past the limit: give the cache back first.
      if (limit && active + cached_.load(std::memory_order_relaxed) + cap > limit &&
          take_flushable_locked(&flushed))
        bump(flushes_, 1);
      bump(active_, cap);  // reserved: concurrent takes count it against the limit
    } else {
      account_take_locked(cap, /*system=*/false);
    }
  }
  *fits = true;
  if (!s) {
    // The source's calls (cudaMalloc, cudaFree: the latter synchronises the device) run
    // outside the lock, so that takes from the cache and frees do not spin meanwhile.
    release_blocks(flushed);
    void* p = source_->allocate(cap);
    if (!p) {  // the system is out: give the cache back, retry
      {
        std::lock_guard<SpinLock> lock(mu_);
        if (take_flushable_locked(&flushed)) bump(flushes_, 1);
      }
      if (!flushed.empty()) {
        release_blocks(flushed);
        p = source_->allocate(cap);
      }
    }
    if (!p) {
      std::lock_guard<SpinLock> lock(mu_);
      bump(active_, -cap);  // the reservation goes back
      return nullptr;
    }
    s = new Storage(p, cap, device_, c, this);
    std::lock_guard<SpinLock> lock(mu_);
    account_take_locked(0, /*system=*/true);
  }
  detail::tl_allocated_bytes += cap;
  // requested_ shares the line workers read (data_): written only when it changes, so that
  // a block reused for the same size does not pull that line from the worker that last ran
  // on it.
  if (s->requested_ != bytes) s->requested_ = bytes;
  return s;
}

void Allocator::account_take_locked(size_t cap, bool system) {
  // The counters change only under mu_: plain load/store pairs, no locked instructions.
  if (cap) bump(active_, cap);
  const size_t now = active_.load(std::memory_order_relaxed);
  if (now > peak_.load(std::memory_order_relaxed)) peak_.store(now, std::memory_order_relaxed);
  bump(num_allocs_, 1);
  if (system) bump(num_system_allocs_, 1);
}

void Allocator::throw_oom(size_t bytes, const char* op, const char* what) {
  std::string extra = source_->describe();
  throw Error(op, detail::concat("out of memory on ", name_, ": requested ", bytes,
                                 " bytes (block ", round_size(bytes), ")", what, ", limit ",
                                 limit_.load(), " bytes, ", active_.load(), " bytes in use, ",
                                 cached_.load(), " cached", extra.empty() ? "" : ", ", extra));
}

void Allocator::too_large(size_t bytes, const char* op) const {
  throw Error(op, detail::concat("out of memory on ", name_, ": requested ", bytes,
                                 " bytes, more than the largest block (2^62 bytes)"));
}

StorageRef Allocator::allocate(size_t bytes, const char* op) {
  check_size(bytes, op);
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    return c->allocate(bytes, device_, op);
  return allocate_block(bytes, op);
}

StorageRef Allocator::allocate_output(size_t bytes, const char* op) {
  return Engine::get().allocates_at_execution() ? allocate_deferred(bytes, op)
                                                : allocate(bytes, op);
}

StorageRef Allocator::allocate_deferred(size_t bytes, const char* op) {
  check_size(bytes, op);
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    return c->allocate(bytes, device_, op);
  // What can never succeed fails now, where the caller asked, not later in a task.
  size_t cap = capacity_.load(std::memory_order_relaxed);
  if (cap == SIZE_MAX) capacity_.store(cap = source_->capacity(), std::memory_order_relaxed);
  const size_t block = round_size(bytes), limit = limit_.load(std::memory_order_relaxed);
  if (limit && block > limit) throw_oom(bytes, op, ", more than the limit");
  if (cap && block > cap)
    throw_oom(bytes, op, detail::concat(", more than the ", cap, " bytes ", name_, " has").c_str());
  auto* s = new (StorageObjects::take()) Storage(nullptr, block, device_, Storage::kDeferred, this);
  s->requested_ = bytes;
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_deferred(s);
  return StorageRef::adopt(s);
}

StorageRef Allocator::wait_for_block(size_t bytes, const char* op) {
  bool fits = true;
  // Over the limit or out of memory: let queued work finish and release what it holds,
  // then retry.
  int64_t t0 = now_ns();
  stalls_.fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    bool progress = reclaim_ && reclaim_();
    if (Storage* s = try_take(bytes, &fits)) {
      stall_ns_.fetch_add(uint64_t(now_ns() - t0), std::memory_order_relaxed);
      if (memory::detail::on()) [[unlikely]]
        memory::detail::on_take(s, bytes, op, false);
      return StorageRef::adopt(s);
    }
    if (!progress) break;
  }
  stall_ns_.fetch_add(uint64_t(now_ns() - t0), std::memory_order_relaxed);
  throw_oom(bytes, op,
            fits ? " (the system has no more memory) with no queued work left"
                 : " with no queued work left");
}

StorageRef Allocator::workspace(size_t bytes, const char* op) {
  if (bytes > kMaxBlock) [[unlikely]]
    throw Error(op, detail::concat("out of memory on ", name_, ": a workspace of ", bytes,
                                   " bytes, more than the largest block (2^62 bytes)"));
  if (detail::tl_graph_capture) [[unlikely]]
    throw Error(op, detail::concat("needs a workspace of ", bytes, " bytes on ", name_,
                                   " while a CUDA graph captures it, more than the graph's own "
                                   "workspace: a block taken now would be baked into the graph"));
  return allocate_now(bytes, op, " for a kernel's workspace", false, true);
}

namespace {
// Per thread: blocks taken for outputs allocated at execution since this thread last
// reclaimed. A worker reclaims in the frontend's batches (Reclaimer::kReclaimEvery blocks,
// or once Reclaimer::kReclaimBytes were taken).
thread_local int tl_taken_since_reclaim = 0;
thread_local size_t tl_bytes_since_reclaim = 0;
}  // namespace

StorageRef Allocator::allocate_now(size_t bytes, const char* op, const char* what,
                                   bool reclaim_first, bool workspace) {
  // Executed work may hold blocks the frontend has not reclaimed yet (it may be busy, or
  // asleep in a sync): give them back first, if a batch is due and that needs no waiting.
  if (reclaim_first && try_reclaim_ &&
      (++tl_taken_since_reclaim >= Reclaimer::kReclaimEvery ||
       (tl_bytes_since_reclaim += bytes) >= Reclaimer::kReclaimBytes) &&
      try_reclaim_()) {
    tl_taken_since_reclaim = 0;
    tl_bytes_since_reclaim = 0;
  }
  bool fits = true;
  Storage* s = try_take(bytes, &fits);
  if (!s) throw_oom(bytes, op, what);
  if (tagged_) s->hazard.last_write = detail::tl_running_task;  // see the header
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_take(s, bytes, op, workspace);
  return StorageRef::adopt(s);
}

void Allocator::free_block(Storage* s) {
  // Before the block joins the cache: once there, another thread may take it again.
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_free(s);
  size_t cap = s->capacity_;
  std::lock_guard<SpinLock> lock(mu_);
  bump(active_, -cap);
  cache_[s->size_class_].push_back(s);
  bump(cached_, cap);
}

size_t Allocator::take_flushable_locked(std::vector<Storage*>* out) {
  size_t freed = 0;
  for (auto& list : cache_) {
    size_t k = 0;
    for (Storage* s : list) {
      if (tagged_ && !reusable(s, nullptr)) {
        list[k++] = s;  // a stream may still use it: keep
        continue;
      }
      bump(cached_, -s->capacity_);
      freed += s->capacity_;
      out->push_back(s);
    }
    list.resize(k);
  }
  return freed;
}

void Allocator::release_blocks(std::vector<Storage*>& blocks) {
  if (blocks.empty()) return;
  size_t bytes = 0;
  for (Storage* s : blocks) {
    bytes += s->capacity_;
    if (Failure* f = s->failure_.exchange(nullptr)) f->release();
    source_->release(s->data_.load(std::memory_order_relaxed), s->capacity_);
    delete s;
  }
  blocks.clear();
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_returned(device_, bytes);
}

void Allocator::empty_cache() {
  std::vector<Storage*> flushed;
  {
    std::lock_guard<SpinLock> lock(mu_);
    take_flushable_locked(&flushed);
  }
  release_blocks(flushed);
}

void Allocator::reset_peak() {
  std::lock_guard<SpinLock> lock(mu_);
  peak_.store(active_.load(), std::memory_order_relaxed);
}

AllocatorStats Allocator::stats() const {
  AllocatorStats st;
  st.active_bytes = active_.load(std::memory_order_relaxed);
  st.peak_bytes = peak_.load(std::memory_order_relaxed);
  st.cached_bytes = cached_.load(std::memory_order_relaxed);
  st.reserved_bytes = st.active_bytes + st.cached_bytes;
  st.num_allocs = num_allocs_.load(std::memory_order_relaxed);
  st.num_system_allocs = num_system_allocs_.load(std::memory_order_relaxed);
  st.limit_bytes = limit_.load(std::memory_order_relaxed);
  st.pressure_stalls = stalls_.load(std::memory_order_relaxed);
  st.pressure_stall_ns = stall_ns_.load(std::memory_order_relaxed);
  st.cache_flushes = flushes_.load(std::memory_order_relaxed);
  return st;
}

}  // namespace tide
