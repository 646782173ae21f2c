// The Tensor handle (docs/architecture.md, Tensors and memory): value semantics over a shared impl,
// views that share storage, the sole-owner test, conversions at the sync points, printing, and the
// rule that assigning to a temporary does not compile.
#include <sstream>
#include <thread>
#include <type_traits>

#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

// a + b = c must not compile: assignment is &-qualified.
static_assert(!std::is_assignable_v<Tensor&&, Tensor>);
static_assert(!std::is_assignable_v<Tensor&&, const Tensor&>);
static_assert(
    !std::is_assignable_v<decltype(std::declval<Tensor>() + std::declval<Tensor>()), Tensor>);
static_assert(std::is_assignable_v<Tensor&, Tensor>);
static_assert(std::is_assignable_v<Tensor&, const Tensor&>);
static_assert(std::is_nothrow_move_constructible_v<Tensor>);
static_assert(std::is_copy_constructible_v<Tensor>);

class TensorTest : public EngineTest {};

TEST_F(TensorTest, HandlesShareTheImpl) {
  Tensor a = from_data({1, 2, 3}, {3});
  EXPECT_TRUE(a.is_sole_owner());
  Tensor b = a;
  EXPECT_EQ(a.id(), b.id());
  EXPECT_FALSE(a.is_sole_owner());
  Tensor c = from_data({1, 2, 3}, {3});
  EXPECT_NE(a.id(), c.id());
  b = c;
  EXPECT_TRUE(a.is_sole_owner());
  EXPECT_EQ(b.id(), c.id());
}

TEST_F(TensorTest, MetadataIsAvailableAtOnce) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::float64);
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.dtype(), DType::float64);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(t.nbytes(), 24u * 8u);
  EXPECT_GE(t.storage()->bytes(), t.nbytes());
  EXPECT_EQ(t.offset(), 0);
  EXPECT_TRUE(contains(error_of([&] { t.size(3); }), "[shape]"));
}

TEST_F(TensorTest, UndefinedTensors) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_TRUE(contains(error_of([&] { u.shape(); }), "[tensor]"));
  std::ostringstream os;
  os << u;
  EXPECT_EQ(os.str(), "Tensor(undefined)");
}

TEST_F(TensorTest, ViewsShareStorage) {
  Tensor x = arange(0.0, 12.0, 1.0, DType::float32).reshape({3, 4});
  EXPECT_EQ(x.shape(), Shape({3, 4}));
  Tensor v = x.reshape({4, -1});
  EXPECT_EQ(v.shape(), Shape({4, 3}));
  EXPECT_EQ(v.storage(), x.storage());
  Tensor s = x.slice(1, 3);
  EXPECT_EQ(s.storage(), x.storage());
  EXPECT_EQ(s.shape(), Shape({2, 4}));
  EXPECT_EQ(s.offset(), 4);
  EXPECT_EQ(s.to_vector(), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  Tensor r = x[2];
  EXPECT_EQ(r.shape(), Shape({4}));
  EXPECT_EQ(r.offset(), 8);
  EXPECT_EQ(r.to_vector(), (std::vector<float>{8, 9, 10, 11}));
  EXPECT_EQ(x[1][2].item(), 6.0f);
  EXPECT_EQ(x[1][2].ndim(), 0);
  EXPECT_EQ(x.slice(1, 1).numel(), 0);
  // A write through a view is seen by the base and the other views.
  x.slice(0, 1).add_(full({1, 4}, 100.0));
  EXPECT_EQ(x[0].to_vector(), (std::vector<float>{100, 101, 102, 103}));
  EXPECT_EQ(v.to_vector()[3], 103.0f);
  // Views of views.
  EXPECT_EQ(x.reshape({12}).slice(5, 7).to_vector(), (std::vector<float>{5, 6}));
  Tensor d = x.detach();
  EXPECT_EQ(d.storage(), x.storage());
  EXPECT_NE(d.id(), x.id());
  EXPECT_FALSE(x.is_sole_owner());  // the storage is shared with its views
}

TEST_F(TensorTest, SoleOwnerIsFalseWhileQueuedWorkHoldsTheStorage) {
  Tensor x = from_data({1, 2}, {2});
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  EXPECT_TRUE(x.is_sole_owner());
  Gate gate;
  gate.hold(tag);
  Tensor y = mul(x, 2.0);  // queued read of x
  EXPECT_FALSE(x.is_sole_owner());
  gate.open();
  Engine::get().synchronize();
  EXPECT_TRUE(x.is_sole_owner());
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 4}));
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(TensorTest, ConversionsAtSyncPoints) {
  Tensor i = arange(5);  // int64
  EXPECT_EQ(i.dtype(), DType::int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(i.to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(sum(i).item<int32_t>(), 10);
  EXPECT_EQ(sum(i).item<double>(), 10.0);

  Tensor f = from_data({2.7, -1.5}, {2});
  EXPECT_EQ(f.to_vector<int64_t>(), (std::vector<int64_t>{2, -1}));  // C++ conversion
  EXPECT_EQ(f[0].item<int32_t>(), 2);
  EXPECT_EQ(f[0].item<double>(), double(2.7f));

  Tensor d = from_data({0.1}, {1}, DType::float64);
  EXPECT_EQ(d.item<double>(), 0.1);
  EXPECT_EQ(d.item<float>(), 0.1f);

  Tensor n = from_vector<int32_t>({7, -8}, {2});
  EXPECT_EQ(n.dtype(), DType::int32);
  EXPECT_EQ(n.to_vector<int32_t>(), (std::vector<int32_t>{7, -8}));
  EXPECT_TRUE(contains(error_of([&] { n.item(); }), "[item]"));
  EXPECT_TRUE(from_data({}, {0}).to_vector().empty());
}

std::string printed(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

TEST_F(TensorTest, Printing) {
  EXPECT_EQ(printed(from_data({1, 2, 3}, {3})), "Tensor([1, 2, 3], shape=(3,), dtype=float32)");
  EXPECT_EQ(printed(from_data({1, 2.5, 3, 4}, {2, 2})),
            "Tensor([[1, 2.5], [3, 4]], shape=(2, 2), dtype=float32)");
  EXPECT_EQ(printed(arange(10)), "Tensor([0, 1, 2, ..., 7, 8, 9], shape=(10,), dtype=int64)");
  EXPECT_EQ(printed(sum(from_data({1, 2, 3}, {3}))), "Tensor(6, shape=(), dtype=float32)");
  EXPECT_EQ(printed(from_vector<int32_t>({-4}, {1})), "Tensor([-4], shape=(1,), dtype=int32)");
  std::string big = printed(zeros({10, 10}));
  EXPECT_TRUE(contains(big, "..."));
  EXPECT_TRUE(contains(big, "shape=(10, 10)"));
}

// Each sync point waits for the queued write: a gate holds the update until the main
// thread is about to sync, and the sync must see the updated values.
TEST_F(TensorTest, SyncPointsWaitForTheLastWrite) {
  struct Case {
    const char* name;
    std::function<float(const Tensor&)> read;
  };
  std::vector<Case> cases = {
      {"item", [](const Tensor& t) { return t.item(); }},
      {"to_vector", [](const Tensor& t) { return t.to_vector()[0]; }},
      {"wait_to_read",
       [](const Tensor& t) {
         t.wait_to_read();
         return *t.data<float>();
       }},
      {"operator<<",
       [](const Tensor& t) {
         return printed(t) == "Tensor([42], shape=(1,), dtype=float32)" ? 42.0f : -1.0f;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = from_data({1}, {1});
    Gate gate;
    Flag syncing;
    gate.hold(x);
    x.mul_(42.0);
    std::thread opener([&] {
      syncing.wait_for();
      gate.open();
    });
    syncing.set();
    EXPECT_EQ(c.read(x), 42.0f);
    opener.join();
    EXPECT_FALSE(gate.timed_out());
  }
}

TEST_F(TensorTest, SyncPointsRethrow) {
  Tensor y = zeros({2});
  debug::fail(ones({1}), y, "bad kernel");
  EXPECT_THROW(y.to_vector(), Error);
  EXPECT_THROW(y.wait_to_read(), Error);
  EXPECT_THROW(printed(y), Error);
  EXPECT_THROW(y[0].item(), Error);  // a view of a failed storage
  // is_ready does not throw: it only says that the write has executed.
  EXPECT_TRUE(y.is_ready());
}

TEST_F(TensorTest, ShapeErrors) {
  Tensor x = zeros({2, 3});
  EXPECT_TRUE(contains(error_of([&] { x.reshape({4, -1}); }), "[reshape]"));
  EXPECT_TRUE(contains(error_of([&] { x.reshape({-1, -1}); }), "[reshape]"));
  EXPECT_TRUE(contains(error_of([&] { x.slice(2, 1); }), "[slice]"));
  EXPECT_TRUE(contains(error_of([&] { x[-1]; }), "[select]"));
  EXPECT_TRUE(contains(error_of([&] { sum(x)[0]; }), "[select]"));
  EXPECT_TRUE(contains(error_of([] { Shape({2, -1}); }), "[shape]"));
}

}  // namespace
}  // namespace tide
