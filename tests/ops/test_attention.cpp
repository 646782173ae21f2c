// The attention family (ops/attention.h): scaled_dot_product_attention against a
// double-precision loop with an explicit softmax, causal and not, on shapes with T = 1,
// T and S past and off the kernels' tiles, D = 1, 3-D and 4-D; its gradients by float64
// central differences; scaled_dot_product_attention_grad's three outputs against the
// closed form; agreement with the matmul-softmax-matmul composition in float32, values
// and gradients; argument errors; results independent of the thread count; traced
// replays bitwise equal to eager on the CPU and the fake GPU; and a forward and backward
// at T = 2048 that allocate nothing of T x T.
#include <cmath>
#include <limits>

#include "core/allocator.h"
#include "core/thread_pool.h"
#include "tests/ops/op_harness.h"
#include "trace/function.h"

namespace tide {
namespace {

using test::Array;
using test::OpCase;
using test::ShapeSet;
using test::Tol;
using V = std::vector<Tensor>;

// The probabilities of every (batch*head, query, key), explicitly: P (bh, t, s).
struct Probs {
  int64_t bh = 0, t = 0, s = 0, d = 0;
  std::vector<double> p;
};

Probs ref_probs(const Array& q, const Array& k, bool causal, double scale) {
  const int r = q.shape.ndim();
  Probs P;
  P.t = q.shape[r - 2];
  P.s = k.shape[r - 2];
  P.d = q.shape[r - 1];
  P.bh = P.t * P.d > 0 ? q.shape.numel() / (P.t * P.d) : 0;
  if (scale < 0) scale = 1.0 / std::sqrt(double(P.d));
  P.p.assign(size_t(P.bh * P.t * P.s), 0.0);
  for (int64_t b = 0; b < P.bh; ++b)
    for (int64_t i = 0; i < P.t; ++i) {
      double* row = &P.p[size_t((b * P.t + i) * P.s)];
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < P.s; ++j) {
        double sc = 0;
        for (int64_t c = 0; c < P.d; ++c)
          sc += q.v[size_t((b * P.t + i) * P.d + c)] * k.v[size_t((b * P.s + j) * P.d + c)];
        row[j] = causal && j > i ? -std::numeric_limits<double>::infinity() : sc * scale;
        mx = std::max(mx, row[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < P.s; ++j) sum += row[j] = std::exp(row[j] - mx);
      for (int64_t j = 0; j < P.s; ++j) row[j] /= sum;
    }
  return P;
}

// P @ v.
Array ref_attention(const std::vector<Array>& in, bool causal, double scale) {
  const Array &q = in[0], &k = in[1], &v = in[2];
  const Probs P = ref_probs(q, k, causal, scale);
  Array out{q.shape, std::vector<double>(q.v.size(), 0.0)};
  for (int64_t b = 0; b < P.bh; ++b)
    for (int64_t i = 0; i < P.t; ++i)
      for (int64_t j = 0; j < P.s; ++j)
        for (int64_t c = 0; c < P.d; ++c)
          out.v[size_t((b * P.t + i) * P.d + c)] +=
              P.p[size_t((b * P.t + i) * P.s + j)] * v.v[size_t((b * P.s + j) * P.d + c)];
  return out;
}

// dq, dk or dv (which = 0, 1, 2) for in = dout, q, k, v, from the explicit P:
// dv = P^T dout, dP = dout v^T, dS = P * (dP - rowsum(dP * P)), dq = scale dS k,
// dk = scale dS^T q.
Array ref_grad(const std::vector<Array>& in, bool causal, double scale, int which) {
  const Array &g = in[0], &q = in[1], &k = in[2], &v = in[3];
  const Probs P = ref_probs(q, k, causal, scale);
  if (scale < 0) scale = 1.0 / std::sqrt(double(P.d));
  Array dq{q.shape, std::vector<double>(q.v.size(), 0.0)};
  Array dk{k.shape, std::vector<double>(k.v.size(), 0.0)};
  Array dv{v.shape, std::vector<double>(v.v.size(), 0.0)};
  const int64_t t = P.t, s = P.s, d = P.d;
  for (int64_t b = 0; b < P.bh; ++b)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> dp(size_t(s), 0.0);
      double rs = 0;
      for (int64_t j = 0; j < s; ++j) {
        for (int64_t c = 0; c < d; ++c)
          dp[size_t(j)] += g.v[size_t((b * t + i) * d + c)] * v.v[size_t((b * s + j) * d + c)];
        rs += dp[size_t(j)] * P.p[size_t((b * t + i) * s + j)];
      }
      for (int64_t j = 0; j < s; ++j) {
        const double p = P.p[size_t((b * t + i) * s + j)], ds = p * (dp[size_t(j)] - rs);
        for (int64_t c = 0; c < d; ++c) {
          const size_t qi = size_t((b * t + i) * d + c), kj = size_t((b * s + j) * d + c);
          dv.v[kj] += p * g.v[qi];
          dq.v[qi] += scale * ds * k.v[kj];
          dk.v[kj] += scale * ds * q.v[qi];
        }
      }
    }
  return which == 0 ? dq : which == 1 ? dk : dv;
}

// q, k, v shape sets: T = 1, T and S off the tiles (32 queries, 64 keys), D = 1, D = 16, 32
// and 64 (compiled for their size on the CPU), 3-D,
// several tiles each way, and small sets (<= 100 elements) for the gradient check.
std::vector<ShapeSet> attention_shapes(bool causal) {
  auto set = [](Shape q, Shape kv) { return ShapeSet{q, kv, kv}; };
  std::vector<ShapeSet> sets{
      set({1, 1, 3, 4}, {1, 1, 3, 4}), set({1, 2, 4, 3}, {1, 2, 4, 3}), set({2, 4, 1}, {2, 4, 1}),
      set({2, 3, 1, 5}, {2, 3, 1, 5}), set({3, 70, 8}, {3, 70, 8}),
      set({2, 2, 97, 16}, {2, 2, 97, 16}), set({1, 2, 1, 1}, {1, 2, 1, 1}),
      // The head sizes the CPU kernels compile for (16 above, 32, 64).
      set({2, 3, 70, 32}, {2, 3, 70, 32}), set({1, 4, 66, 64}, {1, 4, 66, 64})};
  if (!causal) {
    for (ShapeSet s : {set({1, 1, 3, 4}, {1, 1, 5, 4}), set({2, 1, 2}, {2, 3, 2}),
                       set({1, 2, 1, 6}, {1, 2, 130, 6}), set({2, 37, 5}, {2, 70, 5}),
                       set({2, 1, 65, 3}, {2, 1, 1, 3}), set({2, 0, 4}, {2, 3, 4})})
      sets.push_back(s);
  }
  return sets;
}

// scale < 0: the default (std::nullopt).
OpCase sdpa_case(bool causal, double scale) {
  return OpCase{
      .op = OpId::scaled_dot_product_attention,
      .build =
          [causal, scale](const V& in) {
            std::optional<double> sc;
            if (scale >= 0) sc = scale;
            return scaled_dot_product_attention(in[0], in[1], in[2], causal, sc);
          },
      .ref = [causal,
              scale](const std::vector<Array>& in) { return ref_attention(in, causal, scale); },
      .shapes = [causal](std::mt19937&) { return attention_shapes(causal); },
      .tol32 = Tol{1e-5, 1e-4},
      .grad = true,
      .grad_tol = Tol{1e-6, 1e-5}};
}

TIDE_OP_CASES(Attention, Forward) {
  return {sdpa_case(false, -1), sdpa_case(true, -1), sdpa_case(false, 0.7), sdpa_case(true, 1.3)};
}

// The gradient op's dq, dk and dv against the closed form; in: dout, q, k, v.
TIDE_OP_CASES(Attention, Grad) {
  std::vector<OpCase> cases;
  for (bool causal : {false, true})
    for (int which = 0; which < 3; ++which)
      cases.push_back(OpCase{
          .op = OpId::scaled_dot_product_attention_grad,
          .build =
              [causal, which](const V& in) {
                AttentionForward f =
                    scaled_dot_product_attention_forward(in[1], in[2], in[3], causal);
                AttentionGrads g = scaled_dot_product_attention_grad(in[0], in[1], in[2], in[3],
                                                                     f.out, f.lse, causal);
                return which == 0 ? g.q : which == 1 ? g.k : g.v;
              },
          .ref = [causal,
                  which](const std::vector<Array>& in) { return ref_grad(in, causal, -1, which); },
          .shapes =
              [causal](std::mt19937&) {
                std::vector<ShapeSet> sets;
                for (const ShapeSet& s : attention_shapes(causal))
                  sets.push_back(ShapeSet{s[0], s[0], s[1], s[2]});
                return sets;
              },
          .tol32 = Tol{2e-5, 2e-4}});
  return cases;
}

// softmax(scale q k^T + mask) v with tide's matmul and softmax: the reference in float32.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t t = q.size(q.ndim() - 2), d = q.size(q.ndim() - 1);
  Tensor sc = mul(matmul(q, k, {.trans_b = true}), 1.0 / std::sqrt(double(d)));
  if (causal) {
    std::vector<double> mask(size_t(t * t), 0.0);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = i + 1; j < t; ++j) mask[size_t(i * t + j)] = -1e30;
    sc = add(sc, from_data(mask, Shape{t, t}, q.dtype(), q.device()));
  }
  return matmul(softmax(sc), v);
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double atol,
                     double rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= atol + rtol * std::abs(double(want[i])))) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
      ++bad;
    }
}

TEST(Attention, MatchesTheComposition) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Generator gen(3);
    const Tensor q0 = randn({2, 4, 77, 16}, DType::float32, gen);
    const Tensor k0 = randn({2, 4, 77, 16}, DType::float32, gen);
    const Tensor v0 = randn({2, 4, 77, 16}, DType::float32, gen);
    const Tensor w = randn({2, 4, 77, 16}, DType::float32, gen);
    auto run = [&](bool fused) {
      Tensor q = clone(q0).requires_grad_(), k = clone(k0).requires_grad_(),
             v = clone(v0).requires_grad_();
      Tensor out =
          fused ? scaled_dot_product_attention(q, k, v, causal) : composed(q, k, v, causal);
      sum(mul(out, w)).backward();
      return std::vector<std::vector<float>>{out.to_vector<float>(), q.grad().to_vector<float>(),
                                             k.grad().to_vector<float>(),
                                             v.grad().to_vector<float>()};
    };
    const auto f = run(true), c = run(false);
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < f.size(); ++i) expect_near_all(f[i], c[i], 2e-5, 2e-4, names[i]);
  }
}

// Packed q, k, v (one tensor, one gradient) give the bits of three separate slices, on
// the CPU and the case devices, 4-D and 5-D, causal or not.
TEST(Attention, PackedEqualsSeparateBitwise) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices)
    for (bool causal : {false, true})
      for (bool five : {false, true}) {
        SCOPED_TRACE(d.str() + (causal ? " causal" : " full") + (five ? " 5-D" : " 4-D"));
        Generator gen(7);
        const std::vector<int64_t> shape =
            five ? std::vector<int64_t>{3, 2, 3, 33, 8} : std::vector<int64_t>{3, 6, 33, 8};
        const Tensor x0 = randn(Shape(shape), DType::float32, gen).to(d);
        std::vector<int64_t> part(shape.begin() + 1, shape.end());
        const Tensor w = randn(Shape(part), DType::float32, gen).to(d);
        auto run = [&](bool packed) {
          Tensor x = clone(x0).requires_grad_();
          auto s = [&](int64_t i) { return x.slice(i, i + 1).reshape(part); };
          Tensor out = packed ? scaled_dot_product_attention_packed(x, causal)
                              : scaled_dot_product_attention(s(0), s(1), s(2), causal);
          sum(mul(out, w)).backward();
          return std::pair{out.to_vector<float>(), x.grad().to_vector<float>()};
        };
        const auto p = run(true), sep = run(false);
        EXPECT_EQ(p.first, sep.first) << "out";
        EXPECT_EQ(p.second, sep.second) << "d qkv";
      }
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_packed(zeros({2, 4, 5, 8})),
                    "[scaled_dot_product_attention]", "packed qkv", "(2, 4, 5, 8)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_packed(zeros({3, 5, 8})),
                    "[scaled_dot_product_attention]", "packed qkv");
}

// The rows of a fused projection, (B, T, 3, H, D), give the bits of the packed op on the
// heads moved out of them, out and gradient, on the CPU and the case devices; with B*H
// heads past and below twice the thread count (the gradient's one- and two-pass forms), D
// compiled for (32) and not (8, 5), T off the tiles; 16-bit on the CPU.
TEST(Attention, QkvRowsEqualTheMovedHeadsBitwise) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  struct Case {
    int64_t b, t, h, d;
  };
  for (Device dev : devices)
    for (DType dt : {DType::float32, DType::float64, DType::bfloat16})
      for (Case c : {Case{2, 33, 3, 8}, Case{1, 70, 1, 32}, Case{3, 5, 2, 5}})
        for (bool causal : {false, true}) {
          if (is_half(dt) && !dev.is_cpu()) continue;
          SCOPED_TRACE(dev.str() + " " + std::string(name(dt)) + (causal ? " causal" : " full") +
                       " B" + std::to_string(c.b) + " T" + std::to_string(c.t) + " H" +
                       std::to_string(c.h) + " D" + std::to_string(c.d));
          Generator gen(11);
          const Tensor x0 = cast(randn({c.b, c.t, 3, c.h, c.d}, DType::float32, gen), dt).to(dev);
          const Tensor w = cast(randn({c.b, c.t, c.h, c.d}, DType::float32, gen), dt).to(dev);
          auto run = [&](bool rows) {
            Tensor x = clone(x0).requires_grad_();
            Tensor out;
            if (rows) {
              out = scaled_dot_product_attention_qkv(x, causal);
            } else {  // (B, T, 3, H, D) -> (3, B, H, T, D), and the output back
              Tensor heads = swap_axes(swap_axes(swap_axes(x, 0, 2), 1, 2), 2, 3);
              out = swap_axes(scaled_dot_product_attention_packed(heads, causal), 1, 2);
            }
            EXPECT_EQ(out.shape(), Shape({c.b, c.t, c.h, c.d}));
            sum(mul(out, w)).backward();
            return std::pair{cast(out, DType::float64).to_vector<double>(),
                             cast(x.grad(), DType::float64).to_vector<double>()};
          };
          const auto r = run(true), moved = run(false);
          EXPECT_EQ(r.first, moved.first) << "out";
          EXPECT_EQ(r.second, moved.second) << "d qkv";
        }
  const char* op = "[scaled_dot_product_attention]";
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_qkv(zeros({2, 4, 3, 8})), op, "(B, T, 3, H, D)",
                    "(2, 4, 3, 8)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_qkv(zeros({2, 4, 2, 3, 8})), op, "(B, T, 3, H, D)",
                    "(2, 4, 2, 3, 8)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_qkv(zeros({2, 4, 3, 2, 0})), op, "D >= 1");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_qkv(zeros({2, 4, 3, 2, 8}), false, std::nan("")),
                    op, "finite");
}

TEST(AttentionErrors, Arguments) {
  const char* op = "[scaled_dot_product_attention]";
  Tensor q = zeros({2, 3, 5, 4}), k = zeros({2, 3, 6, 4});
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(zeros({5, 4}), zeros({5, 4}), zeros({5, 4})), op,
                    "(B, H, T, D)", "(5, 4)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, zeros({6, 6, 4}), zeros({6, 6, 4})), op,
                    "(2, 3, 5, 4)", "(6, 6, 4)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, zeros({2, 2, 6, 4}), zeros({2, 2, 6, 4})), op,
                    "batch and head", "(2, 2, 6, 4)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, zeros({2, 3, 6, 3}), zeros({2, 3, 6, 3})), op,
                    "differ in D", "(2, 3, 6, 3)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, k, zeros({2, 3, 7, 4})), op, "one shape",
                    "(2, 3, 7, 4)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, k, k, true), op, "T == S", "(2, 3, 5, 4)",
                    "(2, 3, 6, 4)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, k, k, false, std::nan("")), op, "finite");
  EXPECT_TIDE_ERROR(
      scaled_dot_product_attention(zeros({2, 5, 0}), zeros({2, 6, 0}), zeros({2, 6, 0})), op,
      "D >= 1");
  EXPECT_TIDE_ERROR(
      scaled_dot_product_attention(zeros({2, 5, 4}), zeros({2, 0, 4}), zeros({2, 0, 4})), op,
      "S >= 1");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention(q, zeros({2, 3, 6, 4}, DType::float64), k), op,
                    "dtypes differ");
  EXPECT_TIDE_ERROR(
      scaled_dot_product_attention(zeros({1, 2, 2}, DType::int32), zeros({1, 2, 2}, DType::int32),
                                   zeros({1, 2, 2}, DType::int32)),
      op, "floating");
  const char* gop = "[scaled_dot_product_attention_grad]";
  AttentionForward f = scaled_dot_product_attention_forward(q, k, k);
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_grad(zeros({2, 3, 5, 3}), q, k, k, f.out, f.lse),
                    gop, "dout", "(2, 3, 5, 3)", "q's shape");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_grad(f.out, q, k, k, f.out, zeros({2, 3, 6})), gop,
                    "lse", "(2, 3, 6)", "(2, 3, 5)");
  EXPECT_TIDE_ERROR(scaled_dot_product_attention_grad(f.out, q, k, k, f.out, f.lse, true), gop,
                    "T == S");
}

TEST(AttentionErrors, DevicesDiffer) {
  auto devices = test::case_devices();
  if (devices.empty()) GTEST_SKIP() << "no second device";
  Tensor q = zeros({1, 3, 4});
  EXPECT_TIDE_ERROR(
      scaled_dot_product_attention(q, q, zeros({1, 3, 4}, DType::float32, devices[0])),
      "[scaled_dot_product_attention]", "devices differ");
}

// Every item of the kernels' parallel loops is computed alone, in a fixed order: the
// output and the gradients take the same bits on one thread and on several. Here the
// gradient also takes both of its forms (one pass on 1 thread: 6 heads >= 2 per thread; two
// passes on 4), causal and not.
TEST(Attention, DoesNotDependOnTheThreadCount) {
  Generator gen(7);
  const Tensor q0 = randn({3, 2, 150, 24}, DType::float32, gen);
  const Tensor k0 = randn({3, 2, 150, 24}, DType::float32, gen);
  const Tensor v0 = randn({3, 2, 150, 24}, DType::float32, gen);
  const Tensor w = randn({3, 2, 150, 24}, DType::float32, gen);
  for (bool causal : {true, false}) {
    auto run = [&] {
      Tensor q = clone(q0).requires_grad_(), k = clone(k0).requires_grad_(),
             v = clone(v0).requires_grad_();
      Tensor out = scaled_dot_product_attention(q, k, v, causal);
      sum(mul(out, w)).backward();
      return std::vector<std::vector<float>>{out.to_vector<float>(), q.grad().to_vector<float>(),
                                             k.grad().to_vector<float>(),
                                             v.grad().to_vector<float>()};
    };
    const auto [one, four] = test::at_thread_counts(1, 4, run);
    EXPECT_EQ(one, four) << (causal ? "causal" : "not causal");
  }
}

// A self-attention block and its gradients traced with trace::function: every replay
// gives the eager bits, on the CPU and on the fake GPU.
TEST(Attention, TracedMatchesEagerBitwise) {
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices())
    if (op_supported(d, OpId::scaled_dot_product_attention)) devices.push_back(d);
  for (Device dev : devices) {
    SCOPED_TRACE(dev.str());
    Generator gen{9};
    const Tensor x = randn({6, 40, 16}, DType::float32, gen).to(dev);
    std::vector<Tensor> w0;
    for (int i = 0; i < 3; ++i) w0.push_back(randn({16, 16}, DType::float32, gen).to(dev));
    auto make = [&] {
      std::vector<Tensor> w;
      for (const Tensor& t : w0) w.push_back(clone(t).requires_grad_());
      return w;
    };
    auto step = [](std::vector<Tensor>& w, const Tensor& in) {
      for (Tensor& t : w) t.zero_grad();
      Tensor out =
          scaled_dot_product_attention(matmul(in, w[0]), matmul(in, w[1]), matmul(in, w[2]), true);
      Tensor loss = sum(mul(out, out));
      loss.backward();
      return loss;
    };
    std::vector<Tensor> eager = make(), traced = make();
    auto f = trace::function([&](const Tensor& in) { return step(traced, in); }, {.name = "attn"});
    for (int i = 0; i < 3; ++i) {
      Tensor le = step(eager, x), lt = f(x);
      auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); };
      EXPECT_EQ(host(lt), host(le)) << "call " << i;
      for (size_t j = 0; j < 3; ++j)
        EXPECT_EQ(host(traced[j].grad()), host(eager[j].grad())) << "call " << i << " w" << j;
    }
  }
}

// T = 2048: scores of T x T float32 would take 16 MiB. The fused forward and backward
// allocate their outputs and per-row statistics only; the composition, measured the same
// way, shows that the measurement sees a T x T tensor.
TEST(Attention, AllocatesNoScoresMatrix) {
  constexpr int64_t t = 2048, d = 32;
  const size_t scores = size_t(4 * t * t);
  Generator gen(1);
  const Tensor q = randn({1, 1, t, d}, DType::float32, gen);
  const Tensor k = randn({1, 1, t, d}, DType::float32, gen);
  const Tensor v = randn({1, 1, t, d}, DType::float32, gen);
  wait_all();
  auto growth = [&](auto&& fn) {
    wait_all();
    const size_t before = Allocator::get().stats().active_bytes;
    Allocator::get().reset_peak();
    fn();
    wait_all();
    return Allocator::get().stats().peak_bytes - before;
  };
  const size_t fwd = growth([&] {
    AttentionForward f = scaled_dot_product_attention_forward(q, k, v, true);
    f.out.wait_to_read();
  });
  EXPECT_LT(fwd, scores / 16) << "forward";
  const size_t bwd = growth([&] {
    AttentionForward f = scaled_dot_product_attention_forward(q, k, v, true);
    AttentionGrads g = scaled_dot_product_attention_grad(f.out, q, k, v, f.out, f.lse, true);
    g.q.wait_to_read();
  });
  EXPECT_LT(bwd, scores / 8) << "forward and backward";
  const size_t comp = growth([&] { composed(q, k, v, true).wait_to_read(); });
  EXPECT_GE(comp, scores) << "the composition holds T x T scores";
}

}  // namespace
}  // namespace tide
