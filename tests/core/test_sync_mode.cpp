// Synchronous mode and determinism (docs/architecture.md, Engine): SynchronousGuard and
// Engine::set_synchronous run ops in the calling thread before returning, after earlier
// conflicting work; results are bit-identical to async mode; random numbers depend only on
// the seed and the order of the calls, not on the thread count or the execution order.
#include <cstring>
#include <thread>

#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

class SyncMode : public EngineTest {};

// Bitwise equality (so that -0.0 vs 0.0 or NaN payloads would count as differences).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
        return ::testing::AssertionFailure()
               << "first difference at " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// The thread that runs the next op. It waits by polling is_ready(), not by a host sync: a
// sync may run the op itself when the worker is not running (Engine::State::sync_pos), and
// these tests ask who runs it when nobody waits.
std::thread::id run_thread_of_next_op() {
  std::thread::id id;
  std::mutex mu;
  Tensor t = zeros({1});
  debug::gate(t, [&] {
    std::lock_guard lock(mu);
    id = std::this_thread::get_id();
  });
  while (!t.is_ready()) std::this_thread::yield();
  std::lock_guard lock(mu);
  return id;
}

TEST_F(SyncMode, GuardRunsOpsInTheCallingThread) {
  EXPECT_NE(run_thread_of_next_op(), std::this_thread::get_id());  // async: a worker
  {
    SynchronousGuard sync;
    EXPECT_EQ(run_thread_of_next_op(), std::this_thread::get_id());
    Tensor y = add(from_data({1, 2}, {2}), 1.0);
    EXPECT_TRUE(y.is_ready());  // done before the call returned
    EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 3}));
    {
      SynchronousGuard async(false);  // nests, per thread
      EXPECT_NE(run_thread_of_next_op(), std::this_thread::get_id());
    }
    EXPECT_EQ(run_thread_of_next_op(), std::this_thread::get_id());
  }
  EXPECT_NE(run_thread_of_next_op(), std::this_thread::get_id());
}

TEST_F(SyncMode, EngineSettingAppliesToEveryThread) {
  Engine& eng = Engine::get();
  eng.set_synchronous(true);
  EXPECT_TRUE(eng.synchronous());
  bool same = false;
  std::thread th([&] { same = run_thread_of_next_op() == std::this_thread::get_id(); });
  th.join();
  EXPECT_TRUE(same);
  EXPECT_EQ(run_thread_of_next_op(), std::this_thread::get_id());
  {
    SynchronousGuard async(false);  // a thread may opt out
    EXPECT_NE(run_thread_of_next_op(), std::this_thread::get_id());
  }
  eng.set_synchronous(false);
  EXPECT_FALSE(eng.synchronous());
  EXPECT_NE(run_thread_of_next_op(), std::this_thread::get_id());
}

TEST_F(SyncMode, SynchronousOpWaitsForEarlierQueuedWork) {
  Tensor x = from_data({1}, {1});
  Gate gate;
  gate.hold(x);
  x.mul_(5.0);  // queued behind the gate
  Flag calling;
  std::thread opener([&] {
    calling.wait_for();
    gate.open();
  });
  Tensor y;
  {
    SynchronousGuard sync;
    calling.set();
    y = add(x, 1.0);  // runs here, after the queued write
  }
  opener.join();
  EXPECT_EQ(y.item(), 6.0f);
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(SyncMode, QueuedWorkAfterASynchronousWriteSeesIt) {
  Tensor x = from_data({1, 1}, {2});
  {
    SynchronousGuard sync;
    x.mul_(3.0);
  }
  Tensor y;
  {
    StreamGuard g(test_stream(0));
    y = add(x, 1.0);
  }
  EXPECT_EQ(y.to_vector(), (std::vector<float>{4, 4}));
}

TEST_F(SyncMode, FailuresAreStoredNotThrownAtTheCall) {
  SynchronousGuard sync;
  Tensor y = zeros({2});
  const int line = __LINE__ + 1;
  EXPECT_NO_THROW(debug::fail(ones({2}), y, "sync failure"));
  auto ran = std::make_shared<std::atomic<bool>>(false);
  Tensor z = add(y, 1.0);
  debug::gate(z, [ran] { *ran = true; });
  EXPECT_FALSE(ran->load());
  std::string m = error_of([&] { z.wait_to_read(); });
  EXPECT_TRUE(contains(m, "[fail] sync failure"));
  EXPECT_TRUE(contains(m, "test_sync_mode.cpp:" + std::to_string(line)));
  EXPECT_EQ(add(ones({1}), 1.0).item(), 2.0f);
}

// A small MLP step: forward (matmul, relu, softmax, sum) and backward. Returns the loss,
// the gradients and the probabilities, flattened.
std::vector<float> mlp_step(uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({8, 16}, DType::float32, gen);
  Tensor w1 = randn({16, 32}, DType::float32, gen).requires_grad_();
  Tensor w2 = randn({32, 10}, DType::float32, gen).requires_grad_();
  Tensor h = relu(matmul(x, w1));
  Tensor p = softmax(matmul(h, w2));
  Tensor target = rand({8, 10}, DType::float32, gen);
  Tensor loss = sum(mul(p, target));
  loss.backward();
  std::vector<float> out = {loss.item()};
  for (const Tensor& t : {p, w1.grad(), w2.grad()}) {
    std::vector<float> v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST_F(SyncMode, SynchronousResultsAreBitIdenticalToAsync) {
  const std::vector<float> eager = mlp_step(11);
  ASSERT_EQ(eager.size(), 1u + 80 + 16 * 32 + 32 * 10);
  std::vector<float> guarded;
  {
    SynchronousGuard sync;
    guarded = mlp_step(11);
  }
  EXPECT_TRUE(same_bits(eager, guarded));
  Engine::get().set_synchronous(true);
  std::vector<float> global = mlp_step(11);
  Engine::get().set_synchronous(false);
  EXPECT_TRUE(same_bits(eager, global));
  // And on another stream.
  std::vector<float> other;
  {
    StreamGuard g(test_stream(0));
    other = mlp_step(11);
  }
  EXPECT_TRUE(same_bits(eager, other));
  EXPECT_FALSE(same_bits(eager, mlp_step(12)));  // the comparison can fail
}

class ThreadCount : public SyncMode {
 protected:
  void SetUp() override {
    SyncMode::SetUp();
    saved_ = num_threads();
  }
  void TearDown() override {
    set_num_threads(saved_);
    SyncMode::TearDown();
  }
  int saved_ = 1;
};

TEST_F(ThreadCount, SameSeedSameNumbersAtAnyThreadCount) {
  constexpr int64_t n = 300001;  // several parallel chunks, odd tail
  auto draw = [&] {
    Generator gen(2024);
    std::vector<float> a = randn({n}, DType::float32, gen).to_vector();
    std::vector<float> b = rand({n}, DType::float32, gen).to_vector();
    std::vector<float> s = {sum(randn({n}, DType::float32, gen)).item()};
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), s.begin(), s.end());
    return a;
  };
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  const std::vector<float> one = draw();
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  const std::vector<float> two = draw();
  set_num_threads(3);
  const std::vector<float> three = draw();
  EXPECT_TRUE(same_bits(one, two));
  EXPECT_TRUE(same_bits(one, three));
  EXPECT_TRUE(contains(error_of([] { set_num_threads(0); }), "[set_num_threads]"));
}

TEST_F(SyncMode, RandomNumbersAreFixedWhenQueuedNotWhenRun) {
  // a is drawn first but runs last (its stream is held): it still gets the first counters.
  Generator ref(5);
  std::vector<float> a_ref = randn({1000}, DType::float32, ref).to_vector();
  std::vector<float> b_ref = randn({1000}, DType::float32, ref).to_vector();

  Generator gen(5);
  Tensor tag = zeros({1});
  Gate gate;
  Tensor a, b;
  {
    StreamGuard g(test_stream(0));
    gate.hold(tag);
    a = randn({1000}, DType::float32, gen);
  }
  {
    StreamGuard g(test_stream(1));
    b = randn({1000}, DType::float32, gen);
  }
  EXPECT_TRUE(same_bits(b.to_vector(), b_ref));  // ran first
  EXPECT_FALSE(becomes_ready_within(a));
  gate.open();
  EXPECT_TRUE(same_bits(a.to_vector(), a_ref));
  EXPECT_EQ(gen.offset(), ref.offset());
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(SyncMode, ManualSeedResetsTheDefaultGenerator) {
  manual_seed(99);
  std::vector<float> a = randn({100}).to_vector();
  manual_seed(99);
  std::vector<float> b = randn({100}).to_vector();
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_EQ(default_generator().seed(), 99u);
}

}  // namespace
}  // namespace tide
