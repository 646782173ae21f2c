// Memory-policy invariants of the Trainer (docs/training.md, The Trainer), on a small MLP with the
// worker held back by gates so that what each policy lets pile up is deterministic:
//   none       - with the worker held, minibatch i leaves exactly i minibatches queued, and
//                the allocator holds i x Trainer::measure_step_bytes() (within 10 %);
//   per_batch  - a minibatch starts only once the previous minibatch's loss was computed, so
//                the queue holds the current minibatch plus at most the previous one's
//                backward/update tail (its item() waits for the loss, not the update);
//   bounded:K  - with the worker held (from minibatch 2 on) the frontend stalls in the engine
//                with exactly K minibatches of ops queued and about K x step bytes held,
//                before it can start minibatch K+3;
//   all three  - return to the same allocator active bytes after the run, and to the bytes
//                before the rig once it is gone.
//
// How the tests hold the worker without deadlocking a policy that blocks: a data source
// wrapper runs a hook on the frontend before each minibatch (the Trainer calls next_batch
// once per minibatch, after its start-of-run wait_all). For `none` the hook queues a gate
// at minibatch 1 and opens it at minibatch N. For bounded:K a second thread waits for the
// engine's backpressure stall counter, reads the counters while the frontend is blocked and
// opens the gate; if the frontend reaches minibatch K+3 without a stall the hook fails the
// test and opens the gate itself. For per_batch each minibatch's gate opens itself after
// kHold (a stand-in for a slow worker) or when the next minibatch starts; a per_batch that
// did not sync reaches the next minibatch long before (microseconds), which the hook sees.
// Every gate also opens itself (failing its op) after kGatedRunTimeout, and the watchdog of
// test_support.h aborts a hang. No check depends on elapsed time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/test_support.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace tide;
using namespace tide::train;
using namespace std::chrono_literals;
using tide::testing_support::Flag;
using tide::testing_support::Gate;

namespace {

constexpr int64_t kIn = 32, kHidden = 64, kBatch = 16;
// A gated run fails its gate op (and so the run) after this long instead of hanging.
constexpr auto kGatedRunTimeout = std::chrono::milliseconds(10s);
// per_batch: how long each minibatch's gate holds the worker unless the next minibatch
// starts first. Only the detection of a broken per_batch depends on it being long compared
// with queueing one minibatch (tens of microseconds); a correct one passes for any value.
constexpr auto kHold = 10ms;

// Runs hook(i) on the frontend before the i-th minibatch (1-based, counted over epochs),
// before any of that minibatch's ops are queued, then passes the inner source's batch on.
class HookedSource : public DataSource {
 public:
  explicit HookedSource(DataSource& inner) : inner_(inner) {}
  int64_t size() const override { return inner_.size(); }
  int64_t batch_size() const override { return inner_.batch_size(); }
  void reset(uint64_t epoch) override {
    inner_.reset(epoch);
    in_epoch_ = 0;
  }
  std::optional<Batch> next_batch() override {
    if (in_epoch_ >= inner_.num_batches()) return inner_.next_batch();  // epoch over
    ++in_epoch_;
    ++count_;
    if (hook) hook(count_);
    return inner_.next_batch();
  }
  std::function<void(int)> hook;

 private:
  DataSource& inner_;
  int64_t in_epoch_ = 0;
  int count_ = 0;
};

// A gate that holds the worker for at most `hold`, then lets it go on without failing:
// a slow worker that a policy which waits simply waits for.
class TimedHold {
 public:
  TimedHold(const Tensor& t, std::chrono::milliseconds hold) : s_(std::make_shared<Flag>()) {
    debug::gate(t, [s = s_, hold] { (void)s->wait_for(hold); });
  }
  ~TimedHold() { open(); }
  TimedHold(const TimedHold&) = delete;
  TimedHold& operator=(const TimedHold&) = delete;
  void open() { s_->set(); }

 private:
  std::shared_ptr<Flag> s_;
};

// MLP 32-64-1 (ReLU), L2 loss, plain SGD (no state, so every minibatch allocates the same),
// synthetic batches of 16 with 4 per epoch. Fresh rigs start from the same weights and data.
struct Rig {
  Generator gen{1234};
  std::shared_ptr<nn::Sequential> net =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(nn::LinearOptions(kIn, kHidden), gen),
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Linear>(nn::LinearOptions(kHidden, 1), gen)});
  SyntheticSource data{
      SyntheticOptions().examples(4 * kBatch).features(kIn).batch_size(kBatch).seed(7)};
  HookedSource source{data};
  SGD opt{net->parameters(), SGDOptions(0.01)};
  // EngineStats::queued right after each minibatch's loss was queued, and at each hook.
  std::vector<uint64_t> loss_queued, hook_queued;
  Trainer trainer{*net,
                  [this](const Tensor& pred, const Tensor& y) {
                    Tensor l = nn::l2_loss(pred, y);
                    loss_queued.push_back(Engine::get().stats().queued);
                    return l;
                  },
                  opt, source};

  TrainResult run(Policy p, int batches) {
    TrainerOptions o;
    o.batches = batches;
    o.policy = p;
    return trainer.run(o);
  }
};

size_t active_bytes() { return Allocator::get().stats().active_bytes; }

// Allocator active bytes once all queued work has run and been reclaimed.
size_t settled_active_bytes() {
  Engine::get().wait_all();
  Engine::get().reclaim();
  return active_bytes();
}

double held(const StepRecord& r, const TrainResult& res) {
  return double(r.allocator_active) - double(res.baseline_active);
}

// What an ungated run of a fresh rig measures: ops per minibatch (checked to be the same
// for every minibatch), the bytes one queued minibatch holds, and the allocator bytes a run
// leaves behind (end_active - baseline_active).
struct Reference {
  uint64_t ops = 0;
  size_t step_bytes = 0;
  long long end_delta = 0;
};

class PolicyMemory : public testing_support::EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    before_rigs_ = settled_active_bytes();
    ref_.step_bytes = Rig().trainer.measure_step_bytes();
    Rig rig;
    TrainResult r = rig.run(Policy::per_batch(), 4);
    ref_.ops = r.ops_per_step;
    ref_.end_delta = (long long)r.end_active - (long long)r.baseline_active;
    ASSERT_EQ(rig.loss_queued.size(), 4u);
    for (size_t i = 1; i < rig.loss_queued.size(); ++i)
      ASSERT_EQ(rig.loss_queued[i] - rig.loss_queued[i - 1], ref_.ops)
          << "minibatch " << i + 1 << " queued a different number of ops than the first";
    ASSERT_GT(ref_.ops, 0u);
    ASSERT_GT(ref_.step_bytes, 0u);
  }
  void TearDown() override {
    // No rig is alive here: every policy gave back all it allocated.
    EXPECT_EQ(settled_active_bytes(), before_rigs_);
    EngineTest::TearDown();
  }

  // The checks every run ends with: the same bytes left behind as an ungated run.
  void expect_returns_to_reference(const TrainResult& r) const {
    EXPECT_EQ((long long)r.end_active - (long long)r.baseline_active, ref_.end_delta)
        << r.policy.str() << ": after the run the allocator holds a different amount";
  }

  Reference ref_;
  size_t before_rigs_ = 0;
};

TEST_F(PolicyMemory, NoneHoldsOneStepOfBytesPerQueuedMinibatch) {
  constexpr int N = 8;
  Rig rig;
  Gate gate(kGatedRunTimeout);
  Tensor gate_t = zeros(Shape{1});
  rig.source.hook = [&](int i) {
    if (i == 1) gate.hold(gate_t);  // everything of the run queues behind it
    if (i == N) gate.open();        // records 1..N-1 were taken with the worker held
  };
  TrainResult r = rig.run(Policy::none(), N);
  ASSERT_FALSE(gate.timed_out());
  ASSERT_EQ(r.steps.size(), size_t(N));
  EXPECT_EQ(r.ops_per_step, ref_.ops + 1);  // the first minibatch also queued the gate

  const double step = double(ref_.step_bytes);
  for (int i = 1; i < N; ++i) {
    const StepRecord& s = r.steps[size_t(i - 1)];
    // Nothing ran: the gate and i whole minibatches are queued.
    EXPECT_EQ(s.queue_depth, 1 + uint64_t(i) * ref_.ops) << "minibatch " << i;
    EXPECT_NEAR(held(s, r), i * step, 0.1 * i * step)
        << "minibatch " << i << ": allocator growth vs " << i << " x measure_step_bytes() = " << i
        << " x " << ref_.step_bytes;
    if (i > 1) {
      // The engine's own count of bytes held by queued work grows by the same step.
      double grown = double(s.inflight_bytes) - double(r.steps[0].inflight_bytes);
      EXPECT_NEAR(grown, (i - 1) * step, 0.1 * (i - 1) * step) << "minibatch " << i;
    }
  }
  // The worker never got ahead, so `none` really queued every minibatch before any ran.
  EXPECT_GE(r.peak_queue_depth, 1 + uint64_t(N - 1) * ref_.ops);
  expect_returns_to_reference(r);
}

TEST_F(PolicyMemory, PerBatchStartsAMinibatchOnlyAfterThePreviousLoss) {
  constexpr int N = 8;
  Rig rig;
  Tensor gate_t = zeros(Shape{1});
  std::vector<std::unique_ptr<TimedHold>> holds;
  std::vector<uint64_t> executed_at_start;  // EngineStats::executed as minibatch i starts
  rig.source.hook = [&](int) {
    EngineStats st = Engine::get().stats();
    rig.hook_queued.push_back(st.queued);
    executed_at_start.push_back(st.executed);
    if (!holds.empty()) holds.back()->open();  // a broken run goes on without waiting
    holds.push_back(std::make_unique<TimedHold>(gate_t, kHold));
  };
  TrainResult r = rig.run(Policy::per_batch(), N);
  ASSERT_EQ(r.steps.size(), size_t(N));
  ASSERT_EQ(rig.loss_queued.size(), size_t(N));
  ASSERT_EQ(rig.hook_queued.size(), size_t(N));
  const uint64_t ops = ref_.ops + 1;  // each minibatch here also queues its gate
  EXPECT_EQ(r.ops_per_step, ops);
  for (int i = 2; i <= N; ++i) {
    const size_t k = size_t(i - 1);
    // The sync: when minibatch i starts, the worker has run everything up to and including
    // minibatch i-1's loss (which sat behind that minibatch's gate).
    EXPECT_GE(executed_at_start[k], rig.loss_queued[k - 1])
        << "minibatch " << i << " started before minibatch " << i - 1
        << "'s loss was computed: per_batch did not wait for it";
    EXPECT_EQ(rig.hook_queued[k] - rig.hook_queued[k - 1], ops);  // nothing else queued
  }
  const double step = double(ref_.step_bytes);
  for (int i = 2; i <= N; ++i) {
    const StepRecord& s = r.steps[size_t(i - 1)];
    // Queued when minibatch i was recorded: the ops of minibatch i-1 after its loss (its
    // backward and update) that had not run yet, and minibatch i; never anything older.
    const uint64_t queued_at_record =
        i < N ? rig.hook_queued[size_t(i)]
              : rig.loss_queued[size_t(i - 1)] + (rig.hook_queued[1] - rig.loss_queued[0]);
    EXPECT_LE(s.queue_depth, queued_at_record - rig.loss_queued[size_t(i - 2)])
        << "minibatch " << i;
    EXPECT_LT(s.queue_depth, 2 * ops) << "minibatch " << i;
    // In bytes: less than two minibatches (under `none` this would be i of them).
    EXPECT_LT(held(s, r), 2 * step) << "minibatch " << i << ", step bytes " << ref_.step_bytes;
  }
  EXPECT_LT(r.peak_steps_in_flight(), 2.0);
  expect_returns_to_reference(r);
}

// Gate at minibatch 2 (after a synchronize, so only gated work is queued), bound set by the
// Trainer after minibatch 1; a second thread opens the gate once the frontend stalls.
void check_bounded(int k, const Reference& ref) {
  SCOPED_TRACE("bounded:" + std::to_string(k));
  const int N = k + 4;
  Engine& eng = Engine::get();
  Rig rig;
  Gate gate(kGatedRunTimeout);
  Tensor gate_t = zeros(Shape{1});
  Flag stalled;
  std::atomic<bool> run_over{false};
  MemorySnapshot at_stall;
  uint64_t bound_at_stall = 0;
  const uint64_t stalls_before = eng.stats().backpressure_stalls;

  rig.source.hook = [&](int i) {
    if (i == 2) {
      eng.synchronize();
      gate.hold(gate_t);
    }
    if (i == k + 3) {
      // With at most k minibatches of ops in flight and none able to run, queueing
      // minibatches 2..k+2 must have stalled on the bound.
      EXPECT_TRUE(stalled.is_set())
          << "minibatch " << i << " started with the worker held and no backpressure stall: "
          << "more than " << k << " minibatches were queued";
      gate.open();
    }
  };
  std::thread watcher([&] {
    while (!run_over.load()) {
      if (eng.stats().backpressure_stalls > stalls_before) {
        // The frontend blocks in the engine (it released the frontend lock for this read);
        // the gate still holds the worker, so these counters cannot move.
        at_stall = memory_snapshot();
        bound_at_stall = eng.max_inflight_ops();
        stalled.set();
        gate.open();
        return;
      }
      std::this_thread::sleep_for(200us);
    }
  });
  std::exception_ptr err;
  TrainResult r;
  try {
    r = rig.run(Policy::bounded(k), N);
  } catch (...) {
    err = std::current_exception();
  }
  run_over.store(true);
  gate.open();
  watcher.join();
  if (err) std::rethrow_exception(err);

  ASSERT_FALSE(gate.timed_out());
  ASSERT_TRUE(stalled.is_set()) << "the frontend never stalled on the bound";
  EXPECT_EQ(r.ops_per_step, ref.ops);
  EXPECT_EQ(r.bound_ops, uint64_t(k) * ref.ops);
  EXPECT_EQ(bound_at_stall, r.bound_ops);
  // Stalled with exactly the bound queued (each submit is admitted below it) ...
  EXPECT_EQ(at_stall.engine.queue_depth, r.bound_ops);
  // ... which is k minibatches of bytes: the gate, k-1 whole minibatches and all of the
  // k-th but its last (in-place) update.
  const double step = double(ref.step_bytes);
  const double held_at_stall = double(at_stall.allocator.active_bytes) - double(r.baseline_active);
  EXPECT_NEAR(held_at_stall, k * step, 0.1 * k * step) << "step bytes " << ref.step_bytes;
  for (const StepRecord& s : r.steps) {
    EXPECT_LE(s.queue_depth, r.bound_ops) << "minibatch " << s.batch;
    EXPECT_LT(held(s, r), (k + 1) * step) << "minibatch " << s.batch;
  }
  EXPECT_LE(r.peak_steps_in_flight(), double(k));
  EXPECT_GT(eng.stats().backpressure_stalls, stalls_before);
  EXPECT_EQ(eng.max_inflight_ops(), 0u);  // restored
  const long long end_delta = (long long)r.end_active - (long long)r.baseline_active;
  EXPECT_EQ(end_delta, ref.end_delta);
}

TEST_F(PolicyMemory, BoundedStallsWithKMinibatchesQueued) {
  for (int k : {1, 2, 3}) check_bounded(k, ref_);
}

TEST_F(PolicyMemory, AllPoliciesReturnToTheSameActiveBytes) {
  // Ungated runs long enough to cross epochs; each on a fresh rig, so each starts from the
  // same state and must end in it.
  std::vector<TrainResult> results;
  for (Policy p : {Policy::per_batch(), Policy::none(), Policy::bounded(2)}) {
    const size_t before = settled_active_bytes();
    {
      Rig rig;
      results.push_back(rig.run(p, 10));
    }
    EXPECT_EQ(settled_active_bytes(), before) << p.str() << " left bytes behind";
  }
  for (const TrainResult& r : results) {
    EXPECT_EQ(r.baseline_active, results[0].baseline_active) << r.policy.str();
    EXPECT_EQ(r.end_active, results[0].end_active) << r.policy.str();
    expect_returns_to_reference(r);
  }
  // The same numbers too: the policies change when work runs, not what it computes.
  EXPECT_EQ(results[1].final_loss, results[0].final_loss);
  EXPECT_EQ(results[2].final_loss, results[0].final_loss);
}

}  // namespace

namespace {
// Measuring holds the worker behind a gate: bounds that would make the queueing wait
// for it are lifted while measuring (it used to hang) and restored after.
TEST_F(PolicyMemory, MeasureStepBytesWorksWithBoundsAndRestoresThem) {
  Engine& eng = Engine::get();
  Allocator& alloc = Allocator::get();
  size_t limit = alloc.stats().active_bytes + (64u << 20);
  eng.set_max_inflight_ops(4);
  eng.set_max_inflight_bytes(64);
  alloc.set_limit(limit);
  size_t measured = Rig().trainer.measure_step_bytes();
  EXPECT_EQ(eng.max_inflight_ops(), 4u);
  EXPECT_EQ(eng.max_inflight_bytes(), 64u);
  EXPECT_EQ(alloc.stats().limit_bytes, limit);
  eng.set_max_inflight_ops(0);
  eng.set_max_inflight_bytes(0);
  alloc.set_limit(0);
  EXPECT_EQ(measured, ref_.step_bytes);
}

// Outputs allocated at execution (Engine::set_allocation): the same run under `none`, with
// the worker held while every minibatch is queued, holds almost nothing queued, and once the
// worker runs, a few steps' worth at the peak (a worker reclaims every 32 blocks or 1 MiB,
// and this rig's blocks are small) -- where allocated at enqueue it holds N x step bytes.
// Same results, same bytes left behind.
TEST_F(PolicyMemory, NoneAllocatedAtExecutionHoldsNothingQueued) {
  constexpr int N = 16;
  double enqueue_loss = 0;
  {
    Rig rig;
    enqueue_loss = rig.run(Policy::none(), N).final_loss;
  }
  Engine::get().set_allocation(Allocation::at_execution);  // EngineTest restores it
  Rig probe;
  EXPECT_LT(probe.trainer.measure_step_bytes(), ref_.step_bytes / 10)
      << "a queued minibatch still holds its outputs";
  const size_t step_peak = probe.trainer.measure_step_peak();
  EXPECT_GT(step_peak, 0u);
  Rig rig;
  Gate gate(kGatedRunTimeout);
  Tensor gate_t = zeros(Shape{1});
  rig.source.hook = [&](int i) {
    if (i == 1) gate.hold(gate_t);
    if (i == N) gate.open();
  };
  TrainResult r = rig.run(Policy::none(), N);
  ASSERT_FALSE(gate.timed_out());
  EXPECT_EQ(r.allocation, Allocation::at_execution);
  const double step = double(ref_.step_bytes);
  for (int i = 1; i < N; ++i) {  // the worker is held: nothing has taken memory
    const StepRecord& s = r.steps[size_t(i - 1)];
    EXPECT_EQ(s.queue_depth, 1 + uint64_t(i) * ref_.ops) << "minibatch " << i;
    EXPECT_LT(held(s, r), 0.1 * step) << "minibatch " << i;
  }
  EXPECT_LT(double(r.increased_active()), 0.25 * N * step)
      << "at enqueue this run holds " << N << " x " << ref_.step_bytes << " bytes";
  EXPECT_EQ(r.final_loss, enqueue_loss);
  expect_returns_to_reference(r);
}
}  // namespace
