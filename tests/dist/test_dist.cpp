// The MPI process group, run by every rank of `mpirun -n 2` (any size >= 1 works; the tests
// that need two ranks skip alone). Every rank runs the same tests in the same order, so the
// collectives match up. Values are small integers times the rank, exact in float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <latch>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/thread_pool.h"
#include "dist/data_parallel.h"
#include "dist/mpi.h"
#include "error_of.h"
#include "fake_gpu.h"
#include "nn/module.h"
#include "ops/autograd.h"
#include "ops/debug.h"
#include "ops/ops.h"
#include "trace/trace.h"

namespace tide {
namespace {

using dist::ReduceOp;
using test_util::error_of;

dist::ProcessGroup& world() { return dist::mpi_world(); }

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Rank r's element i: (r + 1) * (i % 13 + 1).
template <class T>
Tensor rank_values(int rank, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = T((rank + 1) * (i % 13 + 1));
  return from_vector(v, {n});
}

// Sum over ranks of rank_values: (i % 13 + 1) * S (S + 1) / 2 for S ranks.
double rank_sum(int64_t i, int size) { return double(i % 13 + 1) * size * (size + 1) / 2; }

template <class T>
void expect_reduced(const Tensor& t, int size, ReduceOp op, double scale = 1) {
  std::vector<T> got = t.to_vector<T>();
  const double div = op == ReduceOp::average ? size : 1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = scale * rank_sum(int64_t(i), size) / div;
    if (double(got[i]) != want) {
      ADD_FAILURE() << "element " << i << " of " << got.size() << ": got " << double(got[i])
                    << ", want " << want;
      return;
    }
  }
}

TEST(ProcessGroup, RankAndSizeMatchTheLauncher) {
  auto& pg = world();
  EXPECT_STREQ(pg.backend(), "mpi");
  EXPECT_GE(pg.rank(), 0);
  EXPECT_LT(pg.rank(), pg.size());
  if (const char* n = std::getenv("OMPI_COMM_WORLD_SIZE")) EXPECT_EQ(pg.size(), std::atoi(n));
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) EXPECT_EQ(pg.rank(), std::atoi(r));
  EXPECT_FALSE(pg.stream() == Stream::current());  // collectives have a stream of their own
  EXPECT_EQ(&dist::mpi_world(), &pg);              // one world group per process
}

TEST(AllReduce, SumAndAverageOverOddSizesFloat32AndFloat64) {
  auto& pg = world();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000003)}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", " + dist::name(op));
      Tensor f = rank_values<float>(pg.rank(), n);
      Tensor d = rank_values<double>(pg.rank(), n);
      pg.all_reduce(f, op);
      pg.all_reduce(d, op);
      expect_reduced<float>(f, pg.size(), op);
      expect_reduced<double>(d, pg.size(), op);
    }
  }
}

TEST(AllReduce, IntegerSum) {
  auto& pg = world();
  Tensor a = rank_values<int32_t>(pg.rank(), 7);
  Tensor b = rank_values<int64_t>(pg.rank(), 1000);
  pg.all_reduce(a);
  pg.all_reduce(b);
  expect_reduced<int32_t>(a, pg.size(), ReduceOp::sum);
  expect_reduced<int64_t>(b, pg.size(), ReduceOp::sum);
}

TEST(AllReduce, ViewsAndEmptyTensors) {
  auto& pg = world();
  // A slice reduces its own elements only; the rest of the storage is left alone.
  Tensor base = rank_values<float>(pg.rank(), 20);
  Tensor part = base.slice(5, 12);
  pg.all_reduce(part);
  std::vector<float> got = base.to_vector<float>();
  for (int64_t i = 0; i < 20; ++i) {
    const bool inside = i >= 5 && i < 12;
    const double want = inside ? rank_sum(i, pg.size()) : double((pg.rank() + 1) * (i % 13 + 1));
    EXPECT_EQ(got[size_t(i)], want) << "element " << i;
  }
  Tensor empty = zeros({0, 3});
  pg.all_reduce(empty);
  EXPECT_NO_THROW(empty.wait_to_read());
}

TEST(AllReduce, ManyQueuedBackToBack) {
  auto& pg = world();
  std::vector<Tensor> ts;
  for (int k = 0; k < 16; ++k) ts.push_back(rank_values<float>(pg.rank(), 100 + k));
  for (auto& t : ts) pg.all_reduce(t);
  // Twice on the same tensor: the second sums the first's result.
  Tensor twice = rank_values<double>(pg.rank(), 33);
  pg.all_reduce(twice);
  pg.all_reduce(twice);
  for (auto& t : ts) expect_reduced<float>(t, pg.size(), ReduceOp::sum);
  expect_reduced<double>(twice, pg.size(), ReduceOp::sum, pg.size());
}

// Every element of t is rank `rank`'s rank_values.
template <class T>
void expect_rank_values(const Tensor& t, int rank) {
  std::vector<T> got = t.to_vector<T>();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != T((rank + 1) * (int64_t(i) % 13 + 1))) {
      ADD_FAILURE() << "element " << i << " of " << got.size() << " is " << double(got[i])
                    << ", not rank " << rank << "'s";
      return;
    }
  }
}

TEST(Broadcast, EveryRankGetsTheRootsValues) {
  auto& pg = world();
  for (int root : {0, pg.size() - 1}) {
    SCOPED_TRACE("root " + std::to_string(root));
    Tensor f = rank_values<float>(pg.rank(), 1000003);
    Tensor d = rank_values<double>(pg.rank(), 1);
    Tensor l = rank_values<int64_t>(pg.rank(), 7);
    pg.broadcast(f, root);
    pg.broadcast(d, root);
    pg.broadcast(l, root);
    expect_rank_values<float>(f, root);
    expect_rank_values<double>(d, root);
    expect_rank_values<int64_t>(l, root);
  }
}

// The hazard tracking across streams, with no wait by the caller: the all-reduce sees the
// value written just before it on the default stream, a read queued after it sees the
// reduced values, and a write queued after it waits for it.
TEST(Ordering, AllReduceAfterWriterAndBeforeReaders) {
  auto& pg = world();
  if (Engine::get().synchronous())
    GTEST_SKIP() << "the gate would block the caller (TIDE_ENGINE=sync)";
  const int64_t n = 100003;
  Tensor t = zeros({n});
  t.wait_to_read();
  std::latch release(1);
  debug::gate(t, [&] { release.wait(); });   // holds the default stream
  t.add_(rank_values<float>(pg.rank(), n));  // the writer, queued behind the gate
  pg.all_reduce(t);                          // on the communication stream
  Tensor doubled = t * 2.0;                  // a reader, on the default stream
  t.mul_(3.0);                               // a writer after the collective
  EXPECT_FALSE(t.is_ready());                // nothing waited: the gate still holds everything
  release.count_down();
  expect_reduced<float>(doubled, pg.size(), ReduceOp::sum, 2);
  expect_reduced<float>(t, pg.size(), ReduceOp::sum, 3);
}

TEST(Ordering, WriterOnAnotherStream) {
  auto& pg = world();
  Stream side = Stream::create();
  Tensor src = rank_values<float>(pg.rank(), 5001);
  Tensor t = zeros({5001});
  {
    StreamGuard g(side);
    t.copy_(src);  // the writer, on a stream of its own
  }
  pg.all_reduce(t, ReduceOp::average);
  expect_reduced<float>(t, pg.size(), ReduceOp::average);
}

TEST(Ordering, SynchronousModeGivesTheSameResult) {
  auto& pg = world();
  SynchronousGuard sync;
  Tensor t = rank_values<float>(pg.rank(), 1001);
  pg.all_reduce(t, ReduceOp::average);
  EXPECT_TRUE(t.is_ready());  // ran in the call
  expect_reduced<float>(t, pg.size(), ReduceOp::average);
}

TEST(Barrier, WaitsForEveryRank) {
  auto& pg = world();
  Tensor t = rank_values<float>(pg.rank(), 11);
  pg.all_reduce(t);
  pg.barrier();
  EXPECT_TRUE(t.is_ready());  // the barrier ran after the group's earlier collectives
  expect_reduced<float>(t, pg.size(), ReduceOp::sum);
}

TEST(Errors, BadArgumentsThrowAtTheCall) {
  auto& pg = world();
  EXPECT_TRUE(
      contains(error_of([&] { pg.all_reduce(Tensor()); }), "[all_reduce] got an undefined"));
  EXPECT_TRUE(contains(error_of([&] { pg.all_reduce(ones({3}, DType::int32), ReduceOp::average); }),
                       "average needs a floating tensor, got (3,) int32"));
  EXPECT_TRUE(contains(error_of([&] { pg.broadcast(ones({3}), pg.size()); }),
                       "[broadcast] root " + std::to_string(pg.size()) + " is not a rank"));
  EXPECT_TRUE(contains(error_of([&] { pg.broadcast(ones({3}), -1); }), "[broadcast] root -1"));

  test_util::fake_gpu();
  Tensor gpu = Tensor::empty({4}, DType::float32, Device::cuda(8));
  std::string e = error_of([&] { pg.all_reduce(gpu); });
  EXPECT_TRUE(contains(e,
                       "[all_reduce] needs a tensor on cpu (this group's mpi backend), got "
                       "(4,) float32 on cuda:8"));
  EXPECT_TRUE(contains(e, "dist::nccl_world"));

  Tensor w = ones({2}).requires_grad_();
  EXPECT_TRUE(contains(error_of([&] { pg.all_reduce(w); }), "requires grad and grad mode is on"));
  {
    autograd::NoGrad no_grad;
    pg.all_reduce(w);
  }
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(2, float(pg.size())));

  auto traced = trace::function([&](const Tensor& x) {
    pg.barrier();
    return x + 1.0;
  });
  EXPECT_TRUE(
      contains(error_of([&] { traced(ones({2})); }), "[barrier] cannot be recorded in a trace"));
  // Nothing above reached another rank: the group is in step and still works.
  Tensor t = rank_values<float>(pg.rank(), 3);
  pg.all_reduce(t);
  expect_reduced<float>(t, pg.size(), ReduceOp::sum);
}

// A traced function with collectives: each replay makes the calls with that call's values,
// as the eager function does, and its results are the eager ones bit for bit.
TEST(Traced, CollectivesAreNodesOfTheReplay) {
  auto& pg = world();
  auto body = [&](const Tensor& x) {
    Tensor y = x * 2.0;
    pg.all_reduce(y, ReduceOp::average);
    Tensor z = y + 1.0;
    pg.broadcast(z, pg.size() - 1);
    return z * y;
  };
  auto traced = trace::function(body, {.name = "collectives"});
  for (int call = 0; call < 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<float> v(7);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((pg.rank() + 1) * (call + 3) + int(i));
    Tensor x = from_vector(v, {7});
    std::vector<float> want = body(x).to_vector<float>();
    EXPECT_EQ(traced(x).to_vector<float>(), want);
  }
  EXPECT_EQ(traced.stats().traces, 1);
  EXPECT_GE(traced.stats().replays, 3);
}

// A loop node whose body all-reduces: every iteration of every replay makes the call.
TEST(Traced, CollectivesInALoopBody) {
  auto& pg = world();
  auto body = [&](const Tensor& x) {
    return trace::loop(
        3,
        [&](const Tensor& s) {
          Tensor y = s * 2.0 + 1.0;
          pg.all_reduce(y, ReduceOp::average);
          return y;
        },
        x);
  };
  auto traced = trace::function(body, {.name = "loop_of_collectives"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = full({5}, double(pg.rank() * 10 + call));
    std::vector<float> want = body(x).to_vector<float>();
    EXPECT_EQ(traced(x).to_vector<float>(), want) << "call " << call;
  }
  EXPECT_EQ(traced.stats().traces, 1);
}

// Two all-reduces of the same shape on independent branches, each behind a product whose
// size differs by rank (rank 0's a branch is slow, rank 1's b branch): a replay that runs
// branches at once (streams 2) and called collectives as their inputs became ready would
// reduce rank 0's b with rank 1's a, without any error. They must keep the recorded order.
TEST(Traced, IndependentCollectivesKeepTheirOrder) {
  auto& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int saved_threads = num_threads();  // CI runs each rank with TIDE_NUM_THREADS=1
  set_num_threads(2);
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{saved_threads};
  const int64_t big = 384, n = 64;
  const bool slow_a = pg.rank() % 2 == 0;
  Tensor ha = ones({slow_a ? big : 1, slow_a ? big : 1});
  Tensor hb = ones({slow_a ? 1 : big, slow_a ? 1 : big});
  auto traced = trace::function(
      [&](const Tensor& a, const Tensor& b) {
        Tensor a2 = a + sum(matmul(ha, ha)) * 0.0, b2 = b + sum(matmul(hb, hb)) * 0.0;
        pg.all_reduce(a2);
        pg.all_reduce(b2);
        return a2 * 1000.0 + b2;
      },
      {.name = "two_branches", .streams = 2});
  const double s = double(pg.size()) * (pg.size() + 1) / 2;
  for (int call = 0; call < 6; ++call) {
    Tensor a = full({n}, double(pg.rank() + 1)), b = full({n}, 100.0 * (pg.rank() + 1));
    std::vector<float> got = traced(a, b).to_vector<float>();
    ASSERT_EQ(got, std::vector<float>(size_t(n), float(s * 1000.0 + 100.0 * s))) << "call " << call;
  }
}

// ---- a group on a GPU (what the NCCL backend builds on), on the recording fake GPU ----

// Stands in for NCCL on the fake GPU: pretends to be `ranks` ranks that all hold this
// rank's values, so a sum multiplies by `ranks` and an average leaves the values alone.
// Like NCCL it does not run the reduction itself: it enqueues it on the stream it is given
// (the fake runs host functions in stream order), so a test sees where and when it ran.
class FakeGpuCommunicator final : public dist::Communicator {
 public:
  FakeGpuCommunicator(cuda::FakeDevice& gpu, Device device, int ranks)
      : gpu_(gpu), device_(device), ranks_(ranks) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  const char* backend() const override { return "fake"; }
  Device device() const override { return device_; }
  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp red, void* stream,
                  const char*) override {
    EXPECT_EQ(dtype, DType::float32);
    streams.push_back(stream);
    // Kept with the communicator: captured into a CUDA graph, the host function runs on
    // every launch of the graph.
    jobs_.push_back(std::make_unique<Scale>(
        Scale{static_cast<float*>(data), count, red == ReduceOp::sum ? float(ranks_) : 1.0f}));
    gpu_.launch_host(stream, &Scale::run, jobs_.back().get());
  }
  void broadcast(void*, int64_t, DType, int, void* stream, const char*) override {
    streams.push_back(stream);  // every rank holds the same values already
  }
  void barrier(const char*) override {}
  void all_gather(std::span<const int64_t> in, std::span<int64_t> out, const char*) override {
    ++gathers;
    for (int r = 0; r < ranks_; ++r) std::copy(in.begin(), in.end(), out.begin() + r * in.size());
    if (in.size() == 1 && other_rank_built_no_graph) out[1] = 0;  // the vote on a graph build
  }
  void check_health(const char* op) override {
    if (!async_error.empty()) throw Error(op, async_error);
  }
  std::vector<void*> streams;  // the stream of each data call, in order
  int gathers = 0;             // exchanges: agreements and votes
  bool other_rank_built_no_graph = false;
  std::string async_error;  // what check_health reports ("": healthy)

 private:
  struct Scale {
    float* p;
    int64_t n;
    float f;
    static void run(void* arg) {
      auto* s = static_cast<Scale*>(arg);
      for (int64_t i = 0; i < s->n; ++i) s->p[i] *= s->f;
    }
  };
  std::vector<std::unique_ptr<Scale>> jobs_;
  cuda::FakeDevice& gpu_;
  Device device_;
  int ranks_;
};

// The small MLP (4-8-3, seed 9) the GPU group's data-parallel tests train, on `device`.
std::shared_ptr<nn::Sequential> small_mlp(Device device) {
  Generator gen(9);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions(4, 8), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(8, 3), gen)});
  m->to(device);
  return m;
}

// A process group over a FakeGpuCommunicator of 2 pretended ranks on `device`.
struct FakeGpuGroup {
  FakeGpuGroup(cuda::FakeDevice& gpu, Device device)
      : comm(new FakeGpuCommunicator(gpu, device, 2)),
        group(std::unique_ptr<dist::Communicator>(comm)) {}
  FakeGpuCommunicator* comm;  // owned by group
  dist::ProcessGroup group;
};

// The collective is queued on the group's own CUDA stream with that stream's handle, after
// the compute stream's write of its tensor and before the compute stream's next read.
TEST(GpuGroup, CollectivesRunOnTheGroupsStreamInHazardOrder) {
  cuda::FakeDevice& gpu = test_util::fake_gpu();
  const Device dev = Device::cuda(8);
  FakeGpuGroup fake(gpu, dev);
  FakeGpuCommunicator* comm = fake.comm;
  dist::ProcessGroup& pg = fake.group;
  EXPECT_EQ(pg.device(), dev);
  EXPECT_EQ(pg.stream().device(), dev);
  Tensor t = full({1000}, 3.0, DType::float32, dev);
  Tensor u = t * 1.0;
  u.wait_to_read();
  gpu.clear_calls();
  Tensor w = u * 2.0;  // compute stream writes w...
  pg.all_reduce(w);    // ...the group's stream doubles it...
  Tensor v = w + 1.0;  // ...and the compute stream reads it afterwards
  EXPECT_EQ(v.to_vector<float>(), std::vector<float>(1000, 13.0f));
  ASSERT_EQ(comm->streams.size(), 1u);
  EXPECT_NE(comm->streams[0], nullptr);
  EXPECT_EQ(gpu.count(cuda::FakeDevice::CallKind::launch_host, comm->streams[0]), 1u);
  // Each of the three ran as one launch on its stream: the compute stream twice, the group's
  // once. (Event waits are left out: the engine skips one when the awaited work already
  // completed, which on the fake depends on timing.)
  EXPECT_EQ(gpu.count(cuda::FakeDevice::CallKind::launch_host), 3u);

  std::string e = error_of([&] { pg.all_reduce(ones({3})); });
  EXPECT_TRUE(contains(e,
                       "[all_reduce] needs a tensor on cuda:8 (this group's fake backend), "
                       "got (3,) float32 on cpu"));
  EXPECT_TRUE(contains(e, "dist::mpi_world"));
}

// DataParallel over a GPU group: the model's gradients are averaged on the GPU (the fake's
// 2 equal ranks leave them as they are), so a step equals the one-process step bit for bit,
// and each bucket made one call on the group's stream.
TEST(GpuGroup, DataParallelAveragesGradientsOnTheGpu) {
  cuda::FakeDevice& gpu = test_util::fake_gpu();
  const Device dev = Device::cuda(8);
  FakeGpuGroup fake(gpu, dev);
  FakeGpuCommunicator* comm = fake.comm;
  dist::ProcessGroup& pg = fake.group;
  auto make = [&] { return small_mlp(dev); };
  auto with_dp = make(), alone = make();
  EXPECT_TRUE(contains(error_of([&] {
                         auto cpu_model = make();
                         cpu_model->to(Device::cpu());
                         dist::DataParallel bad(*cpu_model, pg);
                       }),
                       "[data_parallel] parameter '0.weight' is on cpu but the fake group "
                       "reduces on cuda:8"));
  dist::DataParallel dp(*with_dp, pg,
                        dist::DataParallelOptions().first_bucket_bytes(64).bucket_bytes(128));
  pg.stream().synchronize();  // the broadcasts of the constructor ran
  comm->streams.clear();
  Generator data(3);
  Tensor x = randn({5, 4}, DType::float32, data, dev), y = randn({5, 3}, DType::float32, data, dev);
  for (nn::Module* m :
       {static_cast<nn::Module*>(with_dp.get()), static_cast<nn::Module*>(alone.get())}) {
    Tensor d = (*m)(x)-y;
    mean(d * d).backward();
    if (m == with_dp.get()) dp.reduce_gradients();
  }
  auto a = with_dp->named_parameters();
  auto b = alone->parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.grad().to_vector<float>(), b[i].grad().to_vector<float>()) << a[i].first;
  pg.stream().synchronize();  // the worker's calls are visible from here
  EXPECT_EQ(comm->streams.size(), dp.buckets().size());
  for (void* s : comm->streams) EXPECT_EQ(s, comm->streams[0]);
}

// A traced data-parallel step on a GPU: its CUDA graph holds the collectives' kernels, and
// the ranks agree on each collective on the host before every replay (a graph cannot hold
// that exchange: before, they agreed once, at the capture). The graph is built on every
// rank or none: one vote per build. Equal to the eager step bit for bit.
struct TracedGpuStep {
  cuda::FakeDevice& gpu = test_util::fake_gpu();
  const Device dev = Device::cuda(8);
  FakeGpuGroup fake{gpu, dev};
  std::shared_ptr<nn::Sequential> eager = small_mlp(dev), traced = small_mlp(dev);
  const dist::DataParallelOptions opts =
      dist::DataParallelOptions().first_bucket_bytes(64).bucket_bytes(128);
  dist::DataParallel dp_eager{*eager, fake.group, opts}, dp_traced{*traced, fake.group, opts};
  static void step(nn::Module& m, dist::DataParallel& dp, const Tensor& x, const Tensor& y) {
    for (Tensor& p : m.parameters()) p.zero_grad();
    Tensor d = m(x) - y;
    mean(d * d).backward();
    dp.reduce_gradients();
    NoGrad no_grad;
    for (Tensor& p : m.parameters()) p.sub_(p.grad(), 0.1);
  }
  // Runs `calls` steps eagerly and traced on the same data; the traced step's stats.
  trace::FunctionStats run(int calls) {
    auto f = trace::function(
        [&](const Tensor& x, const Tensor& y) {
          step(*traced, dp_traced, x, y);
          return traced->parameters()[0] * 1.0;
        },
        {.name = "dp_step_gpu"});
    Generator data(3);
    for (int i = 0; i < calls; ++i) {
      Tensor x = randn({5, 4}, DType::float32, data, dev),
             y = randn({5, 3}, DType::float32, data, dev);
      step(*eager, dp_eager, x, y);
      f(x, y).wait_to_read();
    }
    fake.group.stream().synchronize();
    auto e = eager->named_parameters();
    auto t = traced->parameters();
    for (size_t i = 0; i < e.size(); ++i)
      EXPECT_EQ(t[i].to_vector<float>(), e[i].second.to_vector<float>()) << e[i].first;
    return f.stats();
  }
};

TEST(GpuGroup, ATracedDataParallelStepAgreesBeforeEveryReplay) {
  TracedGpuStep s;
  const int buckets = int(s.dp_traced.buckets().size());
  ASSERT_GT(buckets, 1);
  s.fake.group.stream().synchronize();  // the constructors' broadcasts agreed
  const int before = s.fake.comm->gathers;
  trace::FunctionStats st = s.run(4);
  EXPECT_EQ(st.graph_fallback, "") << "the step's collectives are in its CUDA graph";
  // The eager steps agree once per bucket per step; each traced call (the first records,
  // then every call replays) agrees per bucket on the host, and the build votes once.
  EXPECT_EQ(s.fake.comm->gathers - before, 4 * buckets + 4 * buckets + 1);
}

TEST(GpuGroup, AnotherRanksFailedGraphBuildMakesEveryRankLaunchNodeByNode) {
  TracedGpuStep s;
  s.fake.comm->other_rank_built_no_graph = true;
  trace::FunctionStats st = s.run(3);
  EXPECT_TRUE(contains(st.graph_fallback, "another rank could not build its graph"))
      << st.graph_fallback;
}

// A collective in a loop body on a GPU: the WHILE node's iterations have no host step for
// the agreement, so the replay launches the nodes one by one (each agreeing), and says why.
TEST(GpuGroup, ACollectiveInALoopBodyLaunchesNodeByNode) {
  cuda::FakeDevice& gpu = test_util::fake_gpu();
  const Device dev = Device::cuda(8);
  FakeGpuGroup fake(gpu, dev);
  auto body = [&](const Tensor& t) {
    Tensor u = t * 0.5;
    fake.group.all_reduce(u);  // the fake's 2 equal ranks: doubles it
    return u + 1.0;
  };
  auto f = trace::function([&](const Tensor& x) { return trace::loop(3, body, x); });
  Tensor x = full({6}, 2.0, DType::float32, dev);
  EXPECT_EQ(f(x).to_vector<float>(), trace::loop(3, body, x).to_vector<float>());
  EXPECT_EQ(f(x).to_vector<float>(), std::vector<float>(6, 5.0f));  // 2 -> 3 -> 4 -> 5
  EXPECT_TRUE(contains(f.stats().graph_fallback, "trace::loop body on a GPU"))
      << f.stats().graph_fallback;
}

// A backend's asynchronous error (NCCL: ncclCommGetAsyncError) fails the next collective on
// every rank with the backend's words, before anything waits on the other ranks.
TEST(GpuGroup, AnAsynchronousBackendErrorFailsTheNextCollective) {
  cuda::FakeDevice& gpu = test_util::fake_gpu();
  const Device dev = Device::cuda(8);
  FakeGpuGroup fake(gpu, dev);
  fake.comm->async_error = "NCCL reported an asynchronous error on rank 0; aborted";
  Tensor t = full({4}, 1.0, DType::float32, dev);
  fake.group.all_reduce(t);
  std::string e = error_of([&] { t.wait_to_read(); });
  EXPECT_TRUE(contains(e, "[all_reduce] NCCL reported an asynchronous error")) << e;
  EXPECT_TRUE(contains(e, "rank 0 of 2")) << e;
  fake.comm->async_error.clear();
  Tensor u = full({4}, 1.0, DType::float32, dev);
  fake.group.all_reduce(u);
  EXPECT_EQ(u.to_vector<float>(), std::vector<float>(4, 2.0f)) << "the group works again";
}

// Ranks that disagree all fail alike, naming each rank's call, instead of hanging; the
// group keeps working afterwards. The watchdog in main.cpp turns a hang into a failure.
TEST(Errors, MismatchedSizesFailOnEveryRank) {
  auto& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = rank_values<float>(pg.rank(), pg.rank() == 0 ? 7 : 8);
  pg.all_reduce(t);
  std::string e = error_of([&] { t.wait_to_read(); });
  EXPECT_TRUE(contains(e,
                       "[all_reduce] ranks disagree on the collective: rank 0: "
                       "all_reduce(sum) (7,) float32; rank 1: all_reduce(sum) (8,) float32"))
      << e;
  EXPECT_TRUE(contains(e, "rank " + std::to_string(pg.rank()) + " of ")) << e;
  EXPECT_TRUE(contains(e, "queued at")) << e;

  Tensor ok = rank_values<float>(pg.rank(), 7);
  pg.all_reduce(ok);
  expect_reduced<float>(ok, pg.size(), ReduceOp::sum);
}

TEST(Errors, MismatchedDtypeOrCollectiveFailOnEveryRank) {
  auto& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = pg.rank() == 0 ? rank_values<float>(0, 5) : rank_values<double>(1, 5);
  pg.all_reduce(t);
  EXPECT_TRUE(
      contains(error_of([&] { t.wait_to_read(); }),
               "rank 0: all_reduce(sum) (5,) float32; rank 1: all_reduce(sum) (5,) float64"));

  // Rank 0 broadcasts while rank 1 waits at a barrier.
  Tensor b = rank_values<float>(pg.rank(), 4);
  std::string e = pg.rank() == 0 ? (pg.broadcast(b, 0), error_of([&] { b.wait_to_read(); }))
                                 : error_of([&] { pg.barrier(); });
  EXPECT_TRUE(contains(e, "rank 0: broadcast(root 0) (4,) float32; rank 1: barrier")) << e;

  pg.barrier();  // in step again
}

// A rank whose input failed earlier cannot contribute: every rank's collective fails, none
// waits for ever, and the failing rank keeps its own error.
TEST(Errors, FailedInputOnOneRankFailsEveryRank) {
  auto& pg = world();
  if (pg.size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = rank_values<float>(pg.rank(), 9);
  if (pg.rank() == 1) debug::fail(t, t, "boom on rank 1");
  pg.all_reduce(t);
  std::string e = error_of([&] { t.wait_to_read(); });
  if (pg.rank() == 1) {
    EXPECT_TRUE(contains(e, "[fail] boom on rank 1")) << e;
  } else {
    EXPECT_TRUE(contains(e,
                         "[all_reduce] the input of rank 1 holds the failure of an earlier "
                         "op"))
        << e;
  }
  Tensor ok = rank_values<float>(pg.rank(), 9);
  pg.all_reduce(ok);
  expect_reduced<float>(ok, pg.size(), ReduceOp::sum);
}

}  // namespace
}  // namespace tide
