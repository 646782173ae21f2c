// Traced mode on a real GPU (cuda:0; the binary exits 77 without one): trace::function's
// CUDA graph (trace/cuda/device_graph.h) with cuBLASLt, CUB and elementwise kernels captured.
// The fake-GPU versions (tests/trace/test_device_graph.cpp) check the graph's shape on
// every machine; these check that CUDA accepts the capture and that replays equal eager
// bit for bit on the same device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/rng.h"
#include "ops/chain_compiler.h"
#include "ops/ops.h"
#include "tests/gpt_rig.h"
#include "tests/train_rig.h"
#include "trace/trace.h"

namespace tide {
namespace {

Device gpu() { return Device::cuda(0); }

// A loop body: one elementwise chain on the state.
Tensor body_step(const Tensor& s) { return tanh(s * 1.01 + 0.5); }

using test_util::train_step;
using test_util::TrainRig;

// The textbook MLP (512-2048-512-1), trained at a smaller batch.
TrainRig textbook(bool adam) {
  return test_util::make_rig({.sizes = {512, 2048, 512, 1},
                              .device = gpu(),
                              .adam = adam,
                              .lr = adam ? 0.001 : 0.005,
                              .seed = 42});
}

void check_textbook(bool adam) {
  TrainRig eager = textbook(adam), traced = textbook(adam);
  auto body = [&](const Tensor& x, const Tensor& y) { return train_step(traced, x, y); };
  auto f = trace::function(body, {.name = "textbook_step", .warmup_calls = 1});
  Generator data(7);
  for (int i = 0; i < 10; ++i) {
    Tensor x = randn({128, 512}, DType::float32, data, gpu());
    Tensor y = ones({128, 1}, DType::float32, gpu());
    Tensor le = train_step(eager, x, y), lt = f(x, y);
    ASSERT_EQ(le.to_vector<float>(), lt.to_vector<float>()) << "loss at step " << i;
  }
  auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_EQ(pe[i].second.to_vector<float>(), pt[i].second.to_vector<float>()) << pe[i].first;
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.graph_fallback, "") << "CUDA must accept the capture";
  EXPECT_GT(s.graph_nodes, size_t(s.kernels));
}

TEST(CudaTrace, TextbookStepWithSgdEqualsEagerBitwise) { check_textbook(false); }
TEST(CudaTrace, TextbookStepWithAdamEqualsEagerBitwise) { check_textbook(true); }

// nanoGPT's optimizer side on the textbook MLP: AdamW over decay groups, the global-norm
// clip fused into the update (and PyTorch's in-place form), the warmup-cosine schedule read
// from the step tensor. One capture; every replay's loss, norm and lr equal eager's.
TEST(CudaTrace, ClippedScheduledStepEqualsEagerBitwise) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused clip" : "clip_grad_norm_");
    test_util::RigOptions o{
        .sizes = {512, 2048, 512, 1}, .device = gpu(), .adam = true, .seed = 42};
    test_util::ClipOptions c{.max_norm = 1.0, .fused = fused};
    c.schedule = WarmupCosineOptions{1e-3, 1e-4, 3, 8};
    TrainRig eager = test_util::make_clipped_rig(o, c), traced = test_util::make_clipped_rig(o, c);
    auto f = trace::function(
        [&](const Tensor& x, const Tensor& y) { return test_util::clipped_step(traced, x, y); },
        {.name = "clipped_step", .warmup_calls = 1});
    Generator data(7);
    for (int i = 0; i < 10; ++i) {
      Tensor x = randn({128, 512}, DType::float32, data, gpu());
      Tensor y = ones({128, 1}, DType::float32, gpu());
      std::vector<Tensor> e = test_util::clipped_step(eager, x, y), t = f(x, y);
      ASSERT_EQ(e[0].to_vector<float>(), t[0].to_vector<float>()) << "loss at step " << i;
      ASSERT_EQ(e[1].to_vector<float>(), t[1].to_vector<float>()) << "norm at step " << i;
      ASSERT_EQ(eager.opt->lr_tensor().to_vector<float>(),
                traced.opt->lr_tensor().to_vector<float>())
          << "lr at step " << i;
      EXPECT_FLOAT_EQ(traced.opt->lr_tensor().item<float>(), float(traced.schedule->lr_at(i)));
    }
    auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_EQ(pe[i].second.to_vector<float>(), pt[i].second.to_vector<float>()) << pe[i].first;
    trace::FunctionStats s = f.stats();
    EXPECT_EQ(s.traces, 1);
    EXPECT_EQ(s.graph_fallback, "") << "CUDA must accept the capture";
  }
}

// Six steps of a char-model GPT of `cfg` on random windows, eager or traced; traced, the
// step must be one trace that CUDA captures.
std::pair<std::vector<float>, std::vector<float>> gpt_char_steps(const nn::GPTConfig& cfg,
                                                                 bool traced) {
  Generator data(9);
  test_util::GptSteps r = test_util::run_gpt_steps(
      cfg, gpu(), 3, WarmupCosineOptions{1e-3, 1e-4, 2, 8}, 6, traced, [&](int) {
        Tensor x = cast(mul(rand({4, 64}, DType::float32, data, gpu()), 65.0), DType::int64);
        Tensor y = cast(mul(rand({4, 64}, DType::float32, data, gpu()), 65.0), DType::int64);
        return std::pair{x, y};
      });
  if (traced) {
    EXPECT_EQ(r.stats.traces, 1);
    EXPECT_EQ(r.stats.graph_fallback, "") << "CUDA must accept the capture";
  }
  return {r.losses, r.params};
}

// The char GPT's whole training step (embedding, layer norm, attention, GELU, tied head,
// cross-entropy, backward, fused clipping, schedule, AdamW) as one CUDA graph: every
// replay's loss and the final parameters equal eager's bits.
TEST(CudaTrace, GptCharStepIsOneGraphAndEqualsEager) {
  auto [el, ep] = gpt_char_steps(nn::GPTConfig::char_model(65), false);
  auto [tl, tp] = gpt_char_steps(nn::GPTConfig::char_model(65), true);
  EXPECT_EQ(el, tl);
  EXPECT_TRUE(ep == tp) << "parameters differ after 6 steps";
}

// The same step with dropout and every block checkpointed (GPTConfig::recompute): one CUDA
// graph whose replays give the plain eager step's bits, as does the eager step with
// recompute (the recompute's dropout reads the forward's counters: ops/checkpoint.h).
TEST(CudaTrace, GptCharStepWithRecomputeIsOneGraphAndEqualsPlainEager) {
  auto run = [&](bool traced, bool recompute) {
    nn::GPTConfig cfg = nn::GPTConfig::char_model(65);
    cfg.dropout = 0.1;
    cfg.recompute = recompute;
    return gpt_char_steps(cfg, traced);
  };
  auto [plain_l, plain_p] = run(false, false);
  auto [eager_l, eager_p] = run(false, true);
  auto [traced_l, traced_p] = run(true, true);
  EXPECT_EQ(plain_l, eager_l);
  EXPECT_EQ(plain_l, traced_l);
  EXPECT_TRUE(plain_p == eager_p) << "eager with recompute: parameters differ after 6 steps";
  EXPECT_TRUE(plain_p == traced_p) << "traced with recompute: parameters differ after 6 steps";
}

// Programmatic edges between tide's kernels (the default; TIDE_CUDA_PDL=0 turns them off):
// a kernel starts launching while the one before it runs and waits on the device for its
// inputs. On for this test whatever the environment.
// The results must stay eager's bits: the training steps (cuBLASLt nodes among tide's), a
// chain of tiny adds, a fused chain and a WHILE loop.
TEST(CudaTrace, ProgrammaticEdgesKeepEagersBits) {
  const bool was = cuda::programmatic_edges_enabled();
  cuda::set_programmatic_edges_enabled(true);
  const uint64_t before = cuda::programmatic_edges_added();
  check_textbook(false);
  check_textbook(true);
  auto adds = [](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 500; ++i) y = y * 1.001 + 0.5;
    return y;
  };
  Tensor x = randn({3, 333}, DType::float32, default_generator(), gpu());
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto f = trace::function(adds, {.fusion = fusion});
    for (int call = 0; call < 3; ++call)
      EXPECT_EQ(f(x).to_vector<float>(), adds(x).to_vector<float>()) << call;
    EXPECT_EQ(f.stats().graph_fallback, "");
  }
  auto g = trace::function(
      [](const Tensor& x, const Tensor& n) { return trace::loop(n, body_step, x); });
  for (int64_t n : {0, 5, 40}) {
    Tensor count = full({1}, double(n), DType::int64, gpu());
    EXPECT_EQ(g(x, count).to_vector<float>(), trace::loop(n, body_step, x).to_vector<float>()) << n;
  }
  EXPECT_EQ(g.stats().graph_fallback, "");
  // Where CUDA refused the loop's graph with them (its WHILE body), it was built again with
  // ordinary edges: correct either way, and the log of a GPU run says which it was.
  std::cout << "[ programmatic edges in a WHILE body: "
            << (g.stats().graph_ordinary_edges_because.empty()
                    ? "taken"
                    : "refused, " + g.stats().graph_ordinary_edges_because)
            << " ]\n";
  EXPECT_GT(cuda::programmatic_edges_added(), before + 500) << "the graphs have such edges";
  cuda::set_programmatic_edges_enabled(was);
}

TEST(CudaTrace, OutputsStayFreshAndClearingFreesTheGraph) {
  Allocator& al = Allocator::get(gpu());
  wait_all();
  const size_t before = al.stats().active_bytes;
  {
    auto f = trace::function([](const Tensor& x) { return sum(relu(x * 2.0 - 1.0), 0); });
    Tensor first = f(ones({64, 64}, DType::float32, gpu()));
    std::vector<Tensor> kept;
    for (int i = 0; i < 100; ++i)
      kept.push_back(f(full({64, 64}, double(i), DType::float32, gpu())));
    EXPECT_EQ(first.to_vector<float>(), std::vector<float>(64, 64.0f));
    for (int i = 0; i < 100; ++i)
      EXPECT_EQ(kept[size_t(i)].to_vector<float>()[0],
                64.0f * std::max(0.0f, 2.0f * float(i) - 1.0f))
          << i;
    EXPECT_EQ(f.stats().graph_fallback, "");
    f.clear();
  }
  wait_all();
  Engine::get().synchronize();
  EXPECT_EQ(al.stats().active_bytes, before) << "the graph's arena and buffers are freed";
}

// Random ops read counters each replay writes on the device: the eager numbers, new per call.
TEST(CudaTrace, RandomOpsAndDropoutStepEqualEagerBitwise) {
  Generator tg(3), eg(3);
  auto body = [](Generator& gen) {
    return [&gen](const Tensor& x) {
      return x * rand({64, 33}, DType::float32, gen, gpu()) +
             randn({64, 33}, DType::float32, gen, gpu());
    };
  };
  auto f = trace::function(body(tg));
  auto eager = body(eg);
  Tensor x = randn({64, 33}, DType::float32, default_generator(), gpu());
  std::vector<float> previous;
  for (int call = 0; call < 3; ++call) {
    std::vector<float> got = f(x).to_vector<float>();
    EXPECT_EQ(got, eager(x).to_vector<float>()) << call;
    EXPECT_NE(got, previous) << call;
    previous = got;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");

  Generator ed(9), td(9);
  auto rig = [&](Generator& drop) {
    return test_util::make_rig({.sizes = {512, 2048, 512, 1},
                                .device = gpu(),
                                .lr = 0.005,
                                .seed = 42,
                                .dropout = 0.1,
                                .dropout_gen = &drop});
  };
  TrainRig er = rig(ed), tr = rig(td);
  auto step =
      trace::function([&](const Tensor& a, const Tensor& b) { return train_step(tr, a, b); },
                      {.name = "dropout_step", .warmup_calls = 1});
  Generator data(7);
  for (int i = 0; i < 5; ++i) {
    Tensor a = randn({128, 512}, DType::float32, data, gpu());
    Tensor b = ones({128, 1}, DType::float32, gpu());
    ASSERT_EQ(train_step(er, a, b).to_vector<float>(), step(a, b).to_vector<float>()) << i;
  }
  EXPECT_EQ(step.stats().graph_fallback, "");
}

// verify = true: the node-by-node launch and the graph leave the same bytes.
TEST(CudaTrace, VerifyPassesForTheTextbookStep) {
  TrainRig r = textbook(false);
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return train_step(r, x, y); },
                           {.name = "verified_step", .verify = true});
  Generator data(2);
  for (int i = 0; i < 3; ++i)
    (void)f(randn({128, 512}, DType::float32, data, gpu()), ones({128, 1}, DType::float32, gpu()))
        .to_vector<float>();
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// Fusion: the step-interpreter kernel gives the separate kernels' bits.
TEST(CudaTrace, FusedChainsAndAFusedTrainingStepEqualEagerBitwise) {
  auto chain = [](const Tensor& x, const Tensor& b) {
    Tensor y = exp(x * 0.5) - b;
    for (int i = 0; i < 6; ++i) y = y + 1.0;
    return tanh(y) * b + sqrt(abs(x)) * 1.5 + 0.25;
  };
  auto f = trace::function(chain, {.fusion = trace::Fusion::elementwise});
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor x = randn({1000, 37}, dt, default_generator(), gpu());
    Tensor b = randn({1000, 37}, dt, default_generator(), gpu());
    if (dt == DType::float32) EXPECT_EQ(f(x, b).to_vector<float>(), chain(x, b).to_vector<float>());
    else EXPECT_EQ(f(x, b).to_vector<double>(), chain(x, b).to_vector<double>());
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
  EXPECT_GT(f.stats().fused_kernels, 0);
  EXPECT_EQ(f.stats().compiled_chains, f.stats().fused_kernels) << f.stats().chain_fallback;

  TrainRig eager = textbook(true), traced = textbook(true);
  auto step = trace::function(
      [&](const Tensor& x, const Tensor& y) { return train_step(traced, x, y); },
      {.name = "fused_step", .fusion = trace::Fusion::elementwise, .warmup_calls = 1});
  Generator data(7);
  for (int i = 0; i < 5; ++i) {
    Tensor x = randn({128, 512}, DType::float32, data, gpu());
    Tensor y = ones({128, 1}, DType::float32, gpu());
    ASSERT_EQ(train_step(eager, x, y).to_vector<float>(), step(x, y).to_vector<float>()) << i;
  }
}

// NVRTC-compiled chains (ops/chain_source.h) against the step interpreter and eager, on
// every dtype: the same bits.
TEST(CudaTrace, CompiledChainsGiveTheInterpretersAndEagersBits) {
  auto floating = [](const Tensor& x, const Tensor& b) {
    Tensor y = sigmoid(x * 0.75) / (abs(b) + 1.0);
    y = maximum(y, b * 0.1) - relu(x - 0.2);
    return pow(exp(-abs(y)), 1.5) + log(abs(b) + 2.0) * tanh(x) - sqrt(abs(y) + 0.5);
  };
  auto integral = [](const Tensor& x, const Tensor& b) {
    Tensor y = x * 3 - b;
    return maximum(relu(y + 2), -(b * b)) + abs(x - 5) * 2;
  };
  const bool was = kernels::compiled_chains_enabled();
  for (DType dt : {DType::float32, DType::float64, DType::int32, DType::int64}) {
    const bool fl = is_floating(dt);
    // Integers: normal draws times 20, cast (truncated) to the dtype.
    auto draw = [&] {
      Tensor r = randn({777, 13}, DType::float64, default_generator(), gpu());
      return fl ? cast(r, dt) : cast(r * 20.0, dt);
    };
    Tensor x = draw(), b = draw();
    auto body = fl ? std::function<Tensor(const Tensor&, const Tensor&)>(floating)
                   : std::function<Tensor(const Tensor&, const Tensor&)>(integral);
    std::vector<Tensor> out;
    for (bool compiled : {true, false}) {
      kernels::set_compiled_chains_enabled(compiled);
      auto f = trace::function(body, {.fusion = trace::Fusion::elementwise});
      out.push_back(f(x, b));
      trace::FunctionStats s = f.stats();
      ASSERT_GT(s.fused_kernels, 0) << name(dt);
      if (compiled)
        EXPECT_EQ(s.compiled_chains, s.fused_kernels) << name(dt) << ": " << s.chain_fallback;
      else EXPECT_EQ(s.compiled_chains, 0);
    }
    out.push_back(body(x, b));
    for (size_t k = 1; k < out.size(); ++k) {  // as float64: every int32/int64 here is exact
      EXPECT_EQ(cast(out[0], DType::float64).to_vector<double>(),
                cast(out[k], DType::float64).to_vector<double>())
          << name(dt) << (k == 1 ? ": compiled vs interpreted" : ": compiled vs eager");
    }
  }
  kernels::set_compiled_chains_enabled(was);
}

TEST(CudaTrace, AFusedLoopRunsAllIterationsInOneKernelAndEqualsEager) {
  auto f =
      trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, body_step, x); },
                      {.fusion = trace::Fusion::elementwise});
  Tensor x = randn({4096}, DType::float32, default_generator(), gpu());
  for (int64_t n : {0, 3, 1000}) {
    Tensor count = full({1}, double(n), DType::int64, gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(), trace::loop(n, body_step, x).to_vector<float>()) << n;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// One step on its own state (y = y + 0.25): the fused loop is one register run per element.
TEST(CudaTrace, AFusedOneStepLoopEqualsTheEagerLoop) {
  auto add = [](const Tensor& y) { return y + 0.25; };
  auto f = trace::function([&](const Tensor& x) { return trace::loop(10000, add, x); },
                           {.fusion = trace::Fusion::elementwise});
  Tensor x = randn({1000}, DType::float32, default_generator(), gpu());
  EXPECT_EQ(f(x).to_vector<float>(), trace::loop(10000, add, x).to_vector<float>());
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// More shapes than the cache keeps: a new signature's graph updates the evicted one's exec
// (cudaGraphExecUpdate) when CUDA accepts it, else is instantiated; outputs equal eager.
TEST(CudaTrace, RetracesAfterEvictionReuseTheEvictedGraphAndEqualEager) {
  auto body = [](const Tensor& x) { return relu(x * 3.0 - 1.0) + 0.5; };
  auto reduce = [](const Tensor& x) { return sum(x * x, 0); };
  auto f = trace::function(body, {.cache_budget = 1});
  auto r = trace::function(reduce, {.cache_budget = 1});
  for (int call = 0; call < 6; ++call) {
    Tensor x =
        randn({int64_t(1000 + 3000 * (call % 2))}, DType::float32, default_generator(), gpu());
    ASSERT_EQ(f(x).to_vector<float>(), body(x).to_vector<float>()) << call;
    ASSERT_EQ(r(x).to_vector<float>(), reduce(x).to_vector<float>()) << call;
  }
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.graph_fallback, "");
  EXPECT_EQ(s.graph_instantiations + s.graph_updates, 6);
  EXPECT_GE(s.graph_updates, 4) << "same kernels, other sizes: CUDA updates the exec";
  trace::FunctionStats rs = r.stats();
  EXPECT_EQ(rs.graph_instantiations + rs.graph_updates, 6);
  std::cout << "[ info ] elementwise: " << s.graph_updates << " updates, " << s.graph_instantiations
            << " instantiations; sum: " << rs.graph_updates << " updates, "
            << rs.graph_instantiations << " instantiations\n";

  // A loop's graph is instantiated each time (its WHILE nodes cannot be updated).
  auto looped = [](const Tensor& x) { return trace::loop(5, body_step, x); };
  auto l = trace::function(looped, {.cache_budget = 1});
  for (int call = 0; call < 4; ++call) {
    Tensor x = randn({int64_t(100 + 200 * (call % 2))}, DType::float32, default_generator(), gpu());
    ASSERT_EQ(l(x).to_vector<float>(), looped(x).to_vector<float>()) << call;
  }
  EXPECT_EQ(l.stats().graph_updates, 0);
  EXPECT_EQ(l.stats().graph_fallback, "");
}

// An argument written in place reaches the caller (the graph copies it back); arguments
// that alias a written one run eagerly. Eager's bits either way.
TEST(CudaTrace, ArgumentsWrittenInPlaceReachTheCaller) {
  auto scale = [](Tensor a, const Tensor& b) {
    a.mul_(1.5);
    return a + b;
  };
  auto f = trace::function(scale);
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({1000}, DType::float32, default_generator(), gpu());
    Tensor y = randn({1000}, DType::float32, default_generator(), gpu());
    Tensor ex = clone(x), ey = clone(y);
    Tensor r = f(x, y), e = scale(ex, ey);
    EXPECT_EQ(r.to_vector<float>(), e.to_vector<float>()) << call;
    EXPECT_EQ(x.to_vector<float>(), ex.to_vector<float>()) << call;
    Tensor s = clone(y), es = clone(y);
    EXPECT_EQ(f(s, s).to_vector<float>(), scale(es, es).to_vector<float>()) << call;
    EXPECT_EQ(s.to_vector<float>(), es.to_vector<float>()) << call;
  }
  EXPECT_EQ(f.stats().aliased_calls, 3);
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// trace::loop as a conditional WHILE node: counts read on the device, equal eager bitwise.

TEST(CudaTrace, LoopWithAnIntCountIsOneWhileNodeAndEqualsEager) {
  auto f = trace::function([](const Tensor& x) { return trace::loop(1000, body_step, x); });
  Tensor x = randn({256}, DType::float32, default_generator(), gpu());
  Tensor traced = f(x), eager = trace::loop(1000, body_step, x);
  EXPECT_EQ(traced.to_vector<float>(), eager.to_vector<float>());
  EXPECT_EQ(f.stats().graph_fallback, "") << "CUDA must accept the WHILE node";
}

// Unrolled (the default chooses several iterations per launch of the body graph, then a
// second WHILE node runs the rest) and one iteration per launch.
TEST(CudaTrace, LoopWithATensorCountIncludingZeroEqualsEager) {
  for (int unroll : {0, 1, 7}) {
    SCOPED_TRACE(unroll);
    auto f = trace::function(
        [](const Tensor& x, const Tensor& n) { return trace::loop(n, body_step, x); },
        {.loop_unroll = unroll});
    Tensor x = randn({3, 70}, DType::float32, default_generator(), gpu());
    for (int64_t n : {0, 1, 17, 0, 300, 6, 7, 8}) {
      Tensor count = full({1}, double(n), DType::int64, gpu());
      EXPECT_EQ(f(x, count).to_vector<float>(), trace::loop(n, body_step, x).to_vector<float>())
          << "n = " << n;
    }
    EXPECT_EQ(f.stats().traces, 1);
    EXPECT_EQ(f.stats().graph_fallback, "");
  }
}

// Chained iterations (trace/cuda/device_loop.h): each next state is a fresh value, so the
// unrolled iterations pass the states on through two buffers each, bindings alternated.
// Large enough that a missing edge between iterations would race on the device; with
// programmatic edges and with ordinary ones, odd and even unrolls.
TEST(CudaTrace, ChainedIterationsOfTwoStatesEqualEagerWithEitherEdges) {
  const bool was = cuda::programmatic_edges_enabled();
  Tensor w = randn({1 << 18}, DType::float32, default_generator(), gpu());
  auto body = [&](const std::vector<Tensor>& s) {
    return std::vector<Tensor>{s[0] * 0.5 + s[1], s[1] - s[0] * w};
  };
  Tensor a = randn({1 << 18}, DType::float32, default_generator(), gpu());
  Tensor b = randn({1 << 18}, DType::float32, default_generator(), gpu());
  for (bool programmatic : {true, false}) {
    cuda::set_programmatic_edges_enabled(programmatic);
    for (int unroll : {0, 2, 3}) {
      SCOPED_TRACE(testing::Message() << "programmatic " << programmatic << ", unroll " << unroll);
      auto f = trace::function(
          [&](const Tensor& x, const Tensor& y, const Tensor& n) {
            std::vector<Tensor> r = trace::loop(n, body, {x, y});
            return std::vector<Tensor>{r[0], r[1]};
          },
          {.loop_unroll = unroll});
      for (int64_t n : {0, 1, 2, 3, 4, 5, 11, 40}) {
        Tensor count = full({1}, double(n), DType::int64, gpu());
        std::vector<Tensor> traced = f(a, b, count), eager = trace::loop(n, body, {a, b});
        EXPECT_EQ(traced[0].to_vector<float>(), eager[0].to_vector<float>()) << n;
        EXPECT_EQ(traced[1].to_vector<float>(), eager[1].to_vector<float>()) << n;
      }
      EXPECT_EQ(f.stats().traces, 1);
      EXPECT_EQ(f.stats().graph_fallback, "");
    }
  }
  cuda::set_programmatic_edges_enabled(was);
}

// A float count that is no number or beyond int64 (core/loop_count.h) is invalid, read on
// the device as a negative count: no iteration, in the WHILE node and in the one-kernel
// fused loop (a plain conversion saturates there: 1e30 would loop for ever).
TEST(CudaTrace, AnInvalidFloatCountRunsNoIterationOnTheDevice) {
  Tensor x = randn({3, 70}, DType::float32, default_generator(), gpu());
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto f = trace::function(
        [](const Tensor& x, const Tensor& n) { return trace::loop(n, body_step, x); },
        {.fusion = fusion});
    for (float v : {NAN, INFINITY, 1e30f}) {
      Tensor count = from_vector<float>({v}, {1}).to(gpu());
      EXPECT_EQ(f(x, count).to_vector<float>(), x.to_vector<float>()) << v;
    }
    Tensor three = from_vector<float>({3.5f}, {1}).to(gpu());
    EXPECT_EQ(f(x, three).to_vector<float>(), trace::loop(3, body_step, x).to_vector<float>());
    EXPECT_EQ(f.stats().graph_fallback, "");
  }
}

TEST(CudaTrace, NestedLoopsWithAMatmulAndSwappedStatesEqualEager) {
  Tensor w = randn({64, 64}, DType::float32, default_generator(), gpu()) * 0.1;
  auto inner = [&](const std::vector<Tensor>& s) {
    return std::vector<Tensor>{s[1], relu(matmul(s[0], w)) + s[1] * 0.5};
  };
  auto outer = [&](const std::vector<Tensor>& s) {
    std::vector<Tensor> r = trace::loop(5, inner, s);
    return std::vector<Tensor>{r[0] * 0.5, r[1]};
  };
  auto f = trace::function([&](const Tensor& a, const Tensor& b) {
    return trace::loop(7, outer, {a, b});
  });
  Tensor a = randn({32, 64}, DType::float32, default_generator(), gpu());
  Tensor b = randn({32, 64}, DType::float32, default_generator(), gpu());
  std::vector<Tensor> traced = f(a, b), eager = trace::loop(7, outer, {a, b});
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(traced[k].to_vector<float>(), eager[k].to_vector<float>()) << k;
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// Random ops in a loop body: counters advanced by the loop kernels on the device.
TEST(CudaTrace, RandomOpsInLoopBodiesEqualTheEagerLoop) {
  auto body = [](Generator& gen) {
    return [&gen](const Tensor& s) {
      return s * 0.5 + rand({1000}, DType::float32, gen, gpu()) -
             randn({1000}, DType::float32, gen, gpu());
    };
  };
  Generator tg(77), eg(77);
  auto f = trace::function([&](const Tensor& x, const Tensor& n) {
    return trace::loop(n, body(tg), trace::loop(20, body(tg), x));
  });
  Tensor x = randn({1000}, DType::float32, default_generator(), gpu());
  for (int64_t n : {0, 7, 50}) {
    Tensor count = full({1}, double(n), DType::int64, gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(),
              trace::loop(count, body(eg), trace::loop(20, body(eg), x)).to_vector<float>())
        << n;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
}

}  // namespace
}  // namespace tide
