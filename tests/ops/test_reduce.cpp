// Reductions through the harness: sum, mean, max and argmax over all elements and over each
// axis (negative axes, keepdim), empty and size-1 extents, integer inputs; sum_to; gradients
// of sum, mean and max (distinct values, so max has no kink inside the step); errors; and
// thread-count independence of the result. Not here: softmax (test_linalg.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/thread_pool.h"
#include "error_of.h"
#include "ops/channel_parts.h"
#include "ops/max_first.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Array;
using test::Check;
using test::OpCase;
using test::ShapeSet;
using V = std::vector<Tensor>;

enum class R { sum, mean, max, argmax };

// Double reference over all elements (axis empty) or one axis, with plain loops.
Array reduce_ref(const Array& a, R kind, std::optional<int> axis, bool keepdim) {
  int64_t outer = 1, n = a.shape.numel(), inner = 1;
  Shape out;
  if (axis) {
    int ax = *axis < 0 ? *axis + a.shape.ndim() : *axis;
    outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= a.shape[i];
    n = a.shape[ax];
    for (int i = ax + 1; i < a.shape.ndim(); ++i) inner *= a.shape[i];
    for (int i = 0; i < a.shape.ndim(); ++i)
      if (i != ax || keepdim) out.push_back(i == ax ? 1 : a.shape[i]);
  }
  Array r{out, std::vector<double>(static_cast<size_t>(outer * inner))};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double s = 0, best = -std::numeric_limits<double>::infinity();
      int64_t arg = 0;
      for (int64_t k = 0; k < n; ++k) {
        double v = a.v[size_t((o * n + k) * inner + i)];
        s += v;
        if (v > best) best = v, arg = k;  // strict: the first maximum wins
      }
      double res = kind == R::sum    ? s
                   : kind == R::mean ? s / double(n)  // 0/0: NaN for an empty mean
                   : kind == R::max  ? best
                                     : double(arg);
      r.v[size_t(o * inner + i)] = res;
    }
  return r;
}

std::vector<ShapeSet> all_shapes(std::mt19937& rng) {
  std::vector<ShapeSet> s = test::unary_shapes(rng);
  s.push_back({Shape{70000}});  // several 16K blocks of the full sum
  return s;
}

// Rank >= 2 so that axes 0, 1, -1 and -2 all exist.
std::vector<ShapeSet> axis_shapes(std::mt19937& rng) {
  std::uniform_int_distribution<int> rank(2, 4);
  return {{test::random_shape(rng, rank(rng), 1, 5)},
          {test::random_shape(rng, rank(rng), 1, 5)},
          {test::random_shape(rng, 2, 2, 7)},
          {Shape{3, 0, 2}},
          {Shape{0, 4}},
          {Shape{1, 5}},
          {Shape{5, 1}},
          {Shape{7, 6000}},    // parallel over rows on one axis, over columns on the other
          {Shape{20000, 3}},   // axis 0: three long strided columns, split on a GPU
          {Shape{2, 40000}}};  // axis 1: two long rows, each cut into 3 CUB segments on a GPU
}

// Max and argmax throw on an empty reduction: leave those sets out (tested separately).
test::ShapesFn nonempty_along(std::optional<int> axis, test::ShapesFn base) {
  return [axis, base](std::mt19937& rng) {
    std::vector<ShapeSet> out;
    for (ShapeSet& s : base(rng)) {
      int64_t n = axis ? s[0].dim(*axis) : s[0].numel();
      if (n > 0) out.push_back(s);
    }
    return out;
  };
}

OpCase reduce_case(R kind, std::optional<int> axis, bool keepdim) {
  static const OpId ids[] = {OpId::sum, OpId::mean, OpId::max, OpId::argmax};
  OpCase c{
      .op = ids[int(kind)],
      .build =
          [=](const V& x) {
            if (!axis) {
              return kind == R::sum    ? sum(x[0])
                     : kind == R::mean ? mean(x[0])
                     : kind == R::max  ? max(x[0])
                                       : argmax(x[0]);
            }
            return kind == R::sum    ? sum(x[0], *axis, keepdim)
                   : kind == R::mean ? mean(x[0], *axis, keepdim)
                   : kind == R::max  ? max(x[0], *axis, keepdim)
                                     : argmax(x[0], *axis, keepdim);
          },
      .ref = [=](const std::vector<Array>& in) { return reduce_ref(in[0], kind, axis, keepdim); },
      .shapes = axis ? test::ShapesFn(axis_shapes) : test::ShapesFn(all_shapes),
      .gen = test::gen_uniform(-2, 2),
      .grad = kind != R::argmax};
  if (kind == R::max || kind == R::argmax) c.shapes = nonempty_along(axis, c.shapes);
  if (kind == R::max) c.gen = test::gen_distinct();
  if (kind == R::argmax) {
    c.gen = test::gen_ints(-2, 2);  // ties: the first maximum must win
    c.out_dtype = [](DType) { return DType::int64; };
  }
  // Summing tens of thousands of float32 values: the result is rounded once, but the
  // inputs are large in number; keep a little room.
  c.tol32 = {1e-5, 1e-5};
  return c;
}

std::vector<OpCase> all_variants(R kind) {
  std::vector<OpCase> v{reduce_case(kind, std::nullopt, false)};
  for (int axis : {0, 1, -1, -2})
    for (bool keepdim : {false, true}) v.push_back(reduce_case(kind, axis, keepdim));
  return v;
}

TIDE_OP_CASES(Reduce, Sum) { return all_variants(R::sum); }
TIDE_OP_CASES(Reduce, Mean) { return all_variants(R::mean); }
TIDE_OP_CASES(Reduce, Max) { return all_variants(R::max); }
TIDE_OP_CASES(Reduce, Argmax) { return all_variants(R::argmax); }

// sum(x * x) in one pass: value and gradient, with inputs far from 1 (squares matter), on
// the full-sum shapes (several 16K blocks included).
TIDE_OP_CASES(Reduce, SumSquares) {
  OpCase c{.op = OpId::sum_squares,
           .build = [](const V& x) { return sum_squares(x[0]); },
           .ref =
               [](const std::vector<Array>& in) {
                 double s = 0;
                 for (double v : in[0].v) s += v * v;
                 return Array{Shape{}, {s}};
               },
           .shapes = all_shapes,
           .gen = test::gen_uniform(-3, 3),
           .tol32 = {1e-5, 1e-5},
           .grad = true};
  return {c};
}

TEST(ReduceErrors, SumSquaresNeedsAFloatingTensor) {
  test::expect_contains(test_util::error_of([] { sum_squares(zeros({3}, DType::int64)); }),
                        {"[sum_squares]"}, "integer input");
}

TIDE_OP_CASES(Reduce, IntegerInputs) {
  std::vector<OpCase> v;
  for (R kind : {R::sum, R::max, R::argmax})
    for (std::optional<int> axis : {std::optional<int>(), std::optional<int>(-1)}) {
      OpCase c = reduce_case(kind, axis, false);
      c.dtypes = {DType::int32, DType::int64};
      c.gen = test::gen_ints(-1000, 1000);
      c.grad = false;
      if (kind == R::sum) c.out_dtype = [](DType) { return DType::int64; };  // int32 widens
      v.push_back(c);
    }
  return v;
}

TEST(Reduce, SumOfInt32AccumulatesInInt64) {
  // 70000 * 40000 overflows int32.
  Tensor x = full({70000}, 40000.0, DType::int32);
  Tensor s = sum(x);
  EXPECT_EQ(s.dtype(), DType::int64);
  EXPECT_EQ(s.item<int64_t>(), int64_t(70000) * 40000);
  EXPECT_EQ(sum(x.reshape({7, 10000}), 1).to_vector<int64_t>(),
            std::vector<int64_t>(7, int64_t(10000) * 40000));
}

TEST(Reduce, EmptyReductions) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_EQ(sum(e, 0).to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(sum(e, 1).shape(), (Shape{0}));
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  for (float v : mean(e, 0).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(max(e, 1).shape(), (Shape{0}));  // nothing to reduce per (empty) row: fine
  EXPECT_TIDE_ERROR(max(e), "[max]", "(0, 3)");
  EXPECT_TIDE_ERROR(max(e, 0), "[max]", "(0, 3)");
  EXPECT_TIDE_ERROR(max(e, -2, true), "[max]", "(0, 3)");
  EXPECT_TIDE_ERROR(argmax(e), "[argmax]", "(0, 3)");
  EXPECT_TIDE_ERROR(argmax(zeros({2, 0}), 1), "[argmax]", "(2, 0)");
}

TEST(Reduce, ArgmaxFirstOnTies) {
  Tensor x = from_data({1, 3, 3, 0, 5, 5, 5, 2}, Shape{2, 4});
  EXPECT_EQ(argmax(x).item<int64_t>(), 4);
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(argmax(x, -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmax(x).dtype(), DType::int64);
}

TEST(Reduce, ResultsDoNotDependOnThreadCount) {
  Generator gen(42);
  Tensor x = randn({300000}, DType::float32, gen);
  Tensor m = randn({600, 500}, DType::float32, gen);
  auto run = [&] {
    return std::vector<std::vector<float>>{
        sum(x).to_vector<float>(), mean(x).to_vector<float>(), sum(m, 0).to_vector<float>(),
        sum(m, 1).to_vector<float>(), max(m, 0).to_vector<float>()};
  };
  const auto [one, two] = test::at_thread_counts(1, 2, run);
  EXPECT_EQ(one, two);  // bit-identical
  double ref = 0;
  for (float v : x.to_vector<float>()) ref += v;
  EXPECT_NEAR(one[0][0], ref, 1e-3);
}

// ---- sum_to: the reverse of broadcasting -----------------------------------------------------

TIDE_OP_CASES(Reduce, SumTo) {
  // (input shape, target): a reference sums every input element into the target element it
  // broadcasts from.
  std::vector<std::pair<Shape, Shape>> pairs{
      {Shape{2, 3, 4}, Shape{3, 4}}, {Shape{2, 3, 4}, Shape{3, 1}},
      {Shape{2, 3, 4}, Shape{1, 4}}, {Shape{2, 3, 4}, Shape{}},
      {Shape{5}, Shape{1}},          {Shape{4, 3}, Shape{4, 1}},
      {Shape{0, 3}, Shape{3}},       {Shape{3, 5, 2}, Shape{1, 1, 2}}};
  std::vector<OpCase> v;
  for (auto [from, to] : pairs) {
    v.push_back(
        OpCase{.op = OpId::sum,
               .build = [to = to](const V& x) { return sum_to(x[0], to); },
               .ref =
                   [to = to](const std::vector<Array>& in) {
                     Array r{to, std::vector<double>(static_cast<size_t>(to.numel()), 0.0)};
                     const Shape& s = in[0].shape;
                     int lead = s.ndim() - to.ndim();
                     for (int64_t flat = 0; flat < s.numel(); ++flat) {
                       int64_t rem = flat, off = 0, mul = 1;
                       for (int d = s.ndim() - 1; d >= 0; --d) {
                         int64_t idx = rem % s[d];
                         rem /= s[d];
                         if (d >= lead) {
                           int64_t td = to[d - lead];
                           off += (td == 1 ? 0 : idx) * mul;
                           mul *= td;
                         }
                       }
                       r.v[size_t(off)] += in[0].v[size_t(flat)];
                     }
                     return r;
                   },
               .shapes = [from = from](std::mt19937&) { return std::vector<ShapeSet>{{from}}; },
               .grad = true});
  }
  return v;
}

TEST(Reduce, SumToEmptyTrailingDim) {
  // (3, 0) summed back to (0,): what add((3, 0), (0,)) needs in backward.
  try {
    Tensor r = sum_to(zeros({3, 0}), Shape{0});
    EXPECT_EQ(r.shape(), (Shape{0}));
    Tensor q = sum_to(zeros({2, 0, 3}), Shape{1, 3});
    EXPECT_EQ(q.to_vector<float>(), std::vector<float>(3, 0.0f));
  } catch (const Error& e) {
    ADD_FAILURE() << "sum_to threw: " << e.what();
  }
}

TEST(Reduce, SumToKeepsTheTensorWhenShapesMatch) {
  Tensor g = ones({2, 3});
  EXPECT_EQ(sum_to(g, Shape{2, 3}).id(), g.id());
  EXPECT_TIDE_ERROR(sum_to(g, Shape{4}), "[sum_to]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(sum_to(g, Shape{2, 3, 1}), "(2, 3)", "(2, 3, 1)");
}

// ---- errors -----------------------------------------------------------------------------------

TEST(ReduceErrors, ArgumentsAreCheckedAtTheCall) {
  Tensor x = ones({2, 3});
  EXPECT_TIDE_ERROR(sum(x, 2), "[sum]", "axis 2", "rank-2");
  EXPECT_TIDE_ERROR(sum(x, -3), "[sum]", "axis -3");
  EXPECT_TIDE_ERROR(mean(x, 5, true), "[mean]", "axis 5");
  EXPECT_TIDE_ERROR(max(x, -3), "[max]", "axis -3");
  EXPECT_TIDE_ERROR(argmax(x, 2), "[argmax]", "axis 2");
  EXPECT_TIDE_ERROR(mean(ones({2, 3}, DType::int32)), "[mean]", "(2, 3)", "int32");
  EXPECT_TIDE_ERROR(mean(ones({4}, DType::int64), 0), "[mean]", "(4,)");
  EXPECT_TIDE_ERROR(sum(ones({}), 0), "[sum]", "0-d");
  // A 0-d tensor reduces over all of its one element.
  EXPECT_EQ(sum(full({}, 3.0)).item<float>(), 3.0f);
  EXPECT_EQ(max(full({}, -2.0)).item<float>(), -2.0f);
}

// Max gradient with tied maxima: the gradient is shared between the tied entries (the sum
// over the row stays the upstream gradient).
TEST(Reduce, MaxGradientSplitsTies) {
  Tensor x = from_data({1, 4, 4, 2, 0, 3}, Shape{2, 3}, DType::float64).requires_grad_();
  sum(max(x, 1)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0, 0, 1}));
  Tensor y = from_data({2, 7, 7}, Shape{3}, DType::float64).requires_grad_();
  max(y).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5}));
}

// A GPU's split max/argmax (ops/cuda/reduce.cu): each chunk's first NaN, else first maximum,
// found in order, then the chunks' pairs combined with MaxFirst (ops/max_first.h), in chunk
// order or any other, give the sequential loop's value and index, NaNs and ties included.
TEST(Reduce, SplitMaxFirstGivesTheSequentialAnswer) {
  using kernels::MaxFirst;
  using kernels::ValIdx;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t state = 12345;
  auto next = [&] {  // a small LCG: values from a few levels, so ties are common
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return int((state >> 33) % 1000);
  };
  for (int64_t n : {1, 2, 7, 100, 1000})
    for (int nans : {0, 1, 3})
      for (int64_t chunk : {1, 3, 7, 50, 2000}) {
        std::vector<double> v(static_cast<size_t>(n), 0.0);
        for (double& x : v) x = double(next() % 9);
        for (int k = 0; k < nans; ++k) v[size_t(next() % n)] = nan;
        // The CPU's loop.
        ValIdx<double> want{v[0], 0};
        for (int64_t k = 1; k < n && !std::isnan(want.v); ++k)
          if (v[size_t(k)] > want.v || std::isnan(v[size_t(k)])) want = {v[size_t(k)], k};
        // The split: each chunk in order, as column_partial_max does.
        std::vector<ValIdx<double>> parts;
        for (int64_t lo = 0; lo < n; lo += chunk) {
          const int64_t hi = std::min(n, lo + chunk);
          ValIdx<double> best{v[size_t(lo)], lo};
          for (int64_t k = lo + 1; k < hi && !kernels::is_nan_value(best.v); ++k)
            if (v[size_t(k)] > best.v || kernels::is_nan_value(v[size_t(k)]))
              best = {v[size_t(k)], k};
          parts.push_back(best);
        }
        ValIdx<double> forward = kernels::max_identity<double>(), backward = forward;
        for (const auto& p : parts) forward = MaxFirst{}(forward, p);
        for (auto it = parts.rbegin(); it != parts.rend(); ++it)
          backward = MaxFirst{}(*it, backward);
        SCOPED_TRACE(testing::Message() << "n " << n << ", NaNs " << nans << ", chunk " << chunk);
        EXPECT_EQ(forward.i, want.i);
        EXPECT_EQ(backward.i, want.i);
        if (std::isnan(want.v)) EXPECT_TRUE(std::isnan(forward.v));
        else EXPECT_EQ(forward.v, want.v);
      }
}

// The cut of a few long rows into CUB segments (ops/channel_parts.h, row_parts): each row's
// segments cover its n elements once, in order, none empty; rows long enough are cut (4 rows
// of 2^20: 64 segments each), short or many rows are not.
TEST(Reduce, RowChunksCoverEachRowOnceInOrder) {
  for (int64_t n : {int64_t(1), int64_t(128), int64_t(16384), int64_t(100000), int64_t(1) << 20,
                    int64_t(3) << 22})
    for (int64_t rows : {2, 3, 4, 100, 5000}) {
      SCOPED_TRACE(testing::Message() << "n " << n << ", rows " << rows);
      const kernels::ChannelParts split = kernels::row_parts(n, rows);
      ASSERT_GE(split.parts, 1);
      EXPECT_LE(split.parts, kernels::kMaxRowParts);
      const kernels::ChunkBegin begin{n, split};
      const kernels::ChunkEnd end{n, split};
      for (int64_t r : {int64_t(0), rows - 1}) {
        int64_t at = r * n;
        for (int64_t p = 0; p < split.parts; ++p) {
          const int64_t seg = r * split.parts + p;
          EXPECT_EQ(begin(seg), at);
          EXPECT_GT(end(seg), begin(seg)) << "no empty segment";
          at = end(seg);
        }
        EXPECT_EQ(at, (r + 1) * n);
      }
    }
  EXPECT_EQ(kernels::row_parts(int64_t(1) << 20, 4).parts, 64);
  EXPECT_EQ(kernels::row_parts(100000, 5000).parts, 1) << "many rows: one segment each";
  EXPECT_EQ(kernels::row_parts(10000, 2).parts, 1) << "short rows stay whole";
}

}  // namespace
}  // namespace tide
