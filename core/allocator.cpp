#include "core/allocator.h"

#include <bit>
#include <chrono>
#include <cstdlib>
#include <new>

#include "core/capture.h"
#include "core/error.h"
#include "core/failure.h"

namespace tide {

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

void Storage::release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (is_slot()) {
    if (Failure* f = failure_.load(std::memory_order_acquire)) f->release();
    if (owned_) owned_->release();
    delete this;
    return;
  }
  Allocator::get(device_).free_block(this);
}

void Storage::reset_for_reuse() {
  if (failure_.load(std::memory_order_relaxed))
    if (Failure* f = failure_.exchange(nullptr, std::memory_order_acq_rel)) f->release();
  hazard = HazardState{};
  refs_.store(1, std::memory_order_relaxed);
}

Allocator& Allocator::cpu() {
  static Allocator* a = new Allocator(Device::cpu());  // never destroyed: storages may be
  return *a;                                           // released during static destruction
}

Allocator& Allocator::get_other(Device d) {
  throw Error("alloc", "no allocator for device " + d.str() +
                           " in this build (CUDA memory is not implemented yet)");
}

Allocator::~Allocator() { empty_cache(); }

Storage* Allocator::try_take(size_t bytes, bool* fits) {
  int c = size_class(bytes);
  size_t cap = class_bytes(c);
  size_t limit = limit_.load(std::memory_order_relaxed);
  std::lock_guard<SpinLock> lock(mu_);
  size_t active = active_.load(std::memory_order_relaxed);
  if (limit && active + cap > limit) {
    *fits = false;
    return nullptr;
  }
  *fits = true;
  Storage* s = nullptr;
  if (!cache_[c].empty()) {
    s = cache_[c].back();
    cache_[c].pop_back();
    bump(cached_, -cap);
    s->reset_for_reuse();
  } else {
    // aligned_alloc needs a size that is a multiple of the alignment (sanitizers abort
    // otherwise); classes such as 80 or 160 bytes are not.
    void* p = std::aligned_alloc(kAlign, (cap + kAlign - 1) / kAlign * kAlign);
    if (!p) throw std::bad_alloc();
    s = new Storage(p, cap, device_, c);
    bump(num_system_allocs_, 1);
  }
  // The counters change only under mu_: plain load/store pairs, no locked instructions.
  size_t now = active + cap;
  active_.store(now, std::memory_order_relaxed);
  if (now > peak_.load(std::memory_order_relaxed)) peak_.store(now, std::memory_order_relaxed);
  bump(num_allocs_, 1);
  detail::tl_allocated_bytes += cap;
  return s;
}

StorageRef Allocator::allocate(size_t bytes, const char* op) {
  if (detail::CaptureSink* c = detail::capturing()) [[unlikely]]
    return c->allocate(bytes, device_, op);
  bool fits = true;
  if (Storage* s = try_take(bytes, &fits)) return StorageRef::adopt(s);
  // Over the limit: let queued work finish and release what it holds, then retry.
  auto t0 = std::chrono::steady_clock::now();
  stalls_.fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    bool progress = reclaim_ && reclaim_();
    if (Storage* s = try_take(bytes, &fits)) {
      stall_ns_.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count()),
                          std::memory_order_relaxed);
      return StorageRef::adopt(s);
    }
    if (!progress) break;
  }
  stall_ns_.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count()),
                      std::memory_order_relaxed);
  throw Error(op, detail::concat("out of memory: requested ", bytes, " bytes (block ",
                                 round_size(bytes), "), limit ", limit_.load(), " bytes, ",
                                 active_.load(), " bytes in use with no queued work left"));
}

StorageRef Allocator::workspace(size_t bytes, const char* op) {
  bool fits = true;
  if (Storage* s = try_take(bytes, &fits)) return StorageRef::adopt(s);
  throw Error(op, detail::concat("out of memory for a ", bytes, "-byte workspace: limit ",
                                 limit_.load(), " bytes, ", active_.load(), " bytes in use"));
}

void Allocator::free_block(Storage* s) {
  size_t cap = s->capacity_;
  std::lock_guard<SpinLock> lock(mu_);
  bump(active_, -cap);
  cache_[s->size_class_].push_back(s);
  bump(cached_, cap);
}

void Allocator::empty_cache() {
  std::lock_guard<SpinLock> lock(mu_);
  for (auto& list : cache_) {
    for (Storage* s : list) {
      bump(cached_, -s->capacity_);
      if (Failure* f = s->failure_.exchange(nullptr)) f->release();
      std::free(s->data_);
      delete s;
    }
    list.clear();
  }
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
  return st;
}

}  // namespace tide
