#include "trace/cpu/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/allocator.h"
#include "core/engine/futex.h"
#include "core/engine/spin_wait.h"
#include "core/engine/spinlock.h"
#include "core/profiler.h"
#include "core/thread_pool.h"
#include "trace/replay.h"

namespace tide::trace {

namespace {

// Nodes whose predecessors ran: a min-heap, so the lowest program index runs first and a
// lone thread walks the program close to its recorded order.
class ReadyNodes {
 public:
  void push(int i) {
    std::lock_guard<SpinLock> lock(mu_);
    heap_.push_back(i);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  int pop() {
    std::lock_guard<SpinLock> lock(mu_);
    if (heap_.empty()) return -1;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    int i = heap_.back();
    heap_.pop_back();
    return i;
  }

 private:
  SpinLock mu_;
  std::vector<int> heap_;
};

class BranchRun {
 public:
  explicit BranchRun(const Graph& g)
      : g_(g), n_(g.nodes.size()), pending_(new std::atomic<int>[n_]) {
    for (size_t i = 0; i < n_; ++i) {
      pending_[i].store(g.deps.predecessors[i], std::memory_order_relaxed);
      if (g.deps.predecessors[i] == 0) ready_.push(int(i));
    }
  }

  // One thread's share: runs ready nodes until all ran or one failed.
  void participate() {
    const uint64_t before = tide::detail::tl_allocated_bytes;
    run_nodes();
    allocated_.fetch_add(tide::detail::tl_allocated_bytes - before, std::memory_order_relaxed);
  }

  uint64_t allocated() const { return allocated_.load(std::memory_order_relaxed); }

  void rethrow_failure() const {
    if (error_node_ != SIZE_MAX) throw std::runtime_error(error_);
  }

 private:
  void run_nodes() {
    for (int idle = 0;;) {
      if (failed_.load(std::memory_order_acquire)) return;
      uint32_t seen = epoch_.load(std::memory_order_seq_cst);
      int i = ready_.pop();
      if (i >= 0) {
        idle = 0;
        run_node(size_t(i));
        continue;
      }
      if (finished_.load(std::memory_order_acquire) == n_) return;
      // Another thread runs the nodes this one waits for: pause, yield, then sleep until
      // a node becomes ready (epoch_ moves on every push, the last node and a failure).
      if (++idle < 64) {
        tide::detail::cpu_relax();
      } else if (idle < 1024) {
        sched_yield();
      } else {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        tide::detail::futex_wait(&epoch_, seen);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        idle = 0;  // woken: something changed, look again before sleeping again
      }
    }
  }

  void run_node(size_t i) {
    const Node& node = g_.nodes[i];
    int64_t t0 = profiling_ ? profiler::detail::now_ns() : 0;
    try {
      node.kernel(cpu_kernel_context());
    } catch (const std::exception& e) {
      fail(i, e.what());
      return;
    }
    if (profiling_)
      profiler::detail::record_op({node.op, stream_, t0, t0, profiler::detail::now_ns()});
    bool woke = false;
    for (int s : g_.deps.successors[i])
      if (pending_[size_t(s)].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        ready_.push(s);
        woke = true;
      }
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) woke = true;
    if (woke) notify();
  }

  void fail(size_t i, const char* what) {
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (i < error_node_) {
        error_node_ = i;
        error_ = node_failure(g_, i, what);
      }
    }
    failed_.store(true, std::memory_order_release);
    notify();
  }

  void notify() {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) tide::detail::futex_wake(&epoch_, INT_MAX);
  }

  const Graph& g_;
  const size_t n_;
  std::unique_ptr<std::atomic<int>[]> pending_;  // per node: predecessors not yet run
  ReadyNodes ready_;
  std::atomic<size_t> finished_{0};
  std::atomic<bool> failed_{false};
  std::atomic<uint32_t> epoch_{0};  // a futex word
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> allocated_{0};
  std::mutex error_mu_;
  size_t error_node_ = SIZE_MAX;
  std::string error_;
  const bool profiling_ = profiler::enabled();
  const int stream_ = profiler::detail::tl_running_stream;  // the replay's stream
};

}  // namespace

uint64_t run_parallel(const Graph& g) {
  BranchRun run(g);
  int threads = std::max(1, std::min(g.streams, num_threads()));
  // One range per thread; a pool that runs the region inline hands the caller all of
  // them, and its one participate() runs every node.
  parallel_for(threads, 1, [&](int64_t, int64_t) { run.participate(); });
  run.rethrow_failure();
  return run.allocated();
}

}  // namespace tide::trace
