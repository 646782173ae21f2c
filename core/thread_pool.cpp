#include "core/thread_pool.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/blas_threads.h"
#include "core/engine/engine_impl.h"
#include "core/engine/futex.h"
#include "core/error.h"

namespace tide {

namespace {

// One mailbox per helper: the caller writes the job, bumps `go`; the helper runs it and
// sets `done` to the same generation.
struct alignas(64) Mailbox {
  std::atomic<uint32_t> go{0};  // a futex word
  std::atomic<uint32_t> done{0};
  std::atomic<bool> sleeping{false};
  std::atomic<bool> stop{false};
  RangeFn* fn = nullptr;
  int64_t begin = 0, end = 0;
  std::exception_ptr error;
};

constexpr int64_t kSpinNs = 20'000;  // a helper's wait for the next region before sleeping
constexpr int64_t kPauseNs = 2'000;  // of which the first part only pauses, then yields

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void helper_loop(Mailbox* m) {
  uint32_t seen = 0;
  for (;;) {
    auto ready = [&] { return m->go.load(std::memory_order_acquire) != seen; };
    // Wait ~20 us by the clock (a pause can take 40 ns: counting them is no timer), then
    // sleep; a helper spinning for long would take the core from the stream's worker. After
    // the first ~2 us it yields instead of pausing: when the next op is a GEMM, OpenBLAS's
    // thread on this core runs at once instead of after the spin (blas_threads.h).
    int64_t start = 0;
    for (int i = 1; !ready(); ++i) {
      if ((i & 31) != 0) {
        cpu_relax();
        continue;
      }
      int64_t t = now_ns();
      if (!start) start = t;
      if (t - start > kSpinNs) break;
      if (t - start > kPauseNs) sched_yield();
    }
    if (!ready()) {
      m->sleeping.store(true, std::memory_order_seq_cst);
      while (m->go.load(std::memory_order_seq_cst) == seen) detail::futex_wait(&m->go, seen);
      m->sleeping.store(false, std::memory_order_relaxed);
    }
    seen = m->go.load(std::memory_order_acquire);
    if (m->stop.load(std::memory_order_acquire)) return;
    try {
      if (m->begin < m->end) (*m->fn)(m->begin, m->end);
    } catch (...) {
      m->error = std::current_exception();
    }
    m->done.store(seen, std::memory_order_release);
  }
}

class Pool {
 public:
  Pool() {
    configure_blas_threads();  // already done at load; kept so the order is explicit
    int n = usable_cores();
    if (const char* e = std::getenv("TIDE_NUM_THREADS")) n = std::atoi(e);
    resize(n < 1 ? 1 : n);
  }

  void run(int64_t n, int64_t grain, RangeFn fn) {
    std::unique_lock lock(mu_, std::try_to_lock);
    // Another region (or a resize) holds the pool: run inline. boxes_ is read only under
    // the lock (resize rebuilds it).
    if (!lock.owns_lock() || boxes_.empty()) {
      fn(0, n);
      return;
    }
    int helpers = int(boxes_.size());
    int64_t parts = std::min<int64_t>(helpers + 1, (n + grain - 1) / grain);
    int64_t chunk = (n + parts - 1) / parts;
    ++gen_;
    for (int64_t p = 1; p < parts; ++p) {
      Mailbox& m = *boxes_[size_t(p - 1)];
      m.fn = &fn;
      m.begin = std::min(n, p * chunk);
      m.end = std::min(n, (p + 1) * chunk);
      m.error = nullptr;
      m.go.store(gen_, std::memory_order_seq_cst);
      if (m.sleeping.load(std::memory_order_seq_cst)) detail::futex_wake(&m.go, 1);
    }
    std::exception_ptr err;
    try {
      fn(0, std::min(n, chunk));
    } catch (...) {
      err = std::current_exception();
    }
    for (int64_t p = 1; p < parts; ++p) {
      Mailbox& m = *boxes_[size_t(p - 1)];
      // A helper that was descheduled mid-chunk needs a core: yield after a short spin.
      for (int i = 1; m.done.load(std::memory_order_acquire) != gen_; ++i) {
        if (i < 256) cpu_relax();  // ~10 us
        else sched_yield();
      }
      if (m.error && !err) err = m.error;
    }
    if (err) std::rethrow_exception(err);
  }

  int size() {
    std::lock_guard lock(mu_);
    return int(boxes_.size()) + 1;
  }

  void resize(int n) {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < boxes_.size(); ++i) {
      boxes_[i]->stop.store(true, std::memory_order_seq_cst);
      boxes_[i]->go.store(++gen_ + 1000000000u, std::memory_order_seq_cst);
      detail::futex_wake(&boxes_[i]->go, 1);
      threads_[i].join();
    }
    boxes_.clear();
    threads_.clear();
    gen_ = 0;
    for (int i = 1; i < n; ++i) {
      boxes_.push_back(std::make_unique<Mailbox>());
      threads_.emplace_back(helper_loop, boxes_.back().get());
    }
  }

 private:
  std::mutex mu_;
  uint32_t gen_ = 0;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::vector<std::thread> threads_;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: workers may run kernels during exit
  return *p;
}

}  // namespace

void parallel_for_ref(int64_t n, int64_t grain, RangeFn fn) { pool().run(n, grain, fn); }
int num_threads() { return pool().size(); }
void set_num_threads(int n) {
  TIDE_CHECK(n >= 1, "set_num_threads", "need at least 1 thread, got ", n);
  pool().resize(n);
}

}  // namespace tide
