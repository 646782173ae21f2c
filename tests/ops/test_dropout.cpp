// dropout (ops/elementwise.h): values and gradients through the harness against the mask its
// rand draw gives, the mask's reproducibility across seeds and devices, the fraction kept, the
// gradient's reuse of the mask (no second draw), eval mode and p == 0, and the argument errors.
// The draw itself (Philox, rand's uniforms) is tested in test_creation.cpp; here rand is the
// reference's source of u, as the op's definition says.
#include <cmath>
#include <limits>

#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Array;
using test::OpCase;
using V = std::vector<Tensor>;

constexpr uint64_t kSeed = 20261130;

// The uniform draw dropout makes for x with a fresh Generator(seed): rand in x's dtype.
std::vector<double> draw(const Shape& s, DType t, uint64_t seed) {
  Generator gen(seed);
  return rand(s, t, gen).to_vector<double>();
}

// dropout(x, p) with a fresh Generator(kSeed) per call, so every call (the harness's value
// run, its backward and each central difference) applies the same mask; the reference keeps
// x / (1 - p), rounded to t as the kernel's factor is, where u >= p.
OpCase dropout_case(DType t, double p) {
  OpCase c{.op = OpId::dropout,
           .build =
               [p](const V& x) {
                 Generator gen(kSeed);
                 return dropout(x[0], p, true, gen);
               },
           .ref =
               [t, p](const std::vector<Array>& in) {
                 const std::vector<double> u = draw(in[0].shape, t, kSeed);
                 const double scale =
                     t == DType::float32 ? double(float(1.0 / (1.0 - p))) : 1.0 / (1.0 - p);
                 const double threshold = t == DType::float32 ? double(float(p)) : p;
                 Array out = in[0];
                 for (size_t i = 0; i < out.v.size(); ++i)
                   out.v[i] = u[i] >= threshold ? out.v[i] * scale : 0.0;
                 return out;
               },
           .dtypes = {t},
           .grad = true};
  return c;
}

TIDE_OP_CASES(Dropout, AgainstItsDraw) {
  return {dropout_case(DType::float32, 0.3), dropout_case(DType::float64, 0.3),
          dropout_case(DType::float32, 0.75), dropout_case(DType::float64, 0.1)};
}

std::vector<Device> all_devices() {
  std::vector<Device> d = test::case_devices();
  d.insert(d.begin(), Device::cpu());
  return d;
}

// The same seed gives the same mask on every device and call after call; another seed
// another mask. Zero exactly where the draw is below p.
TEST(Dropout, SameSeedSameMaskOnEveryDevice) {
  const int64_t n = 4099;  // not a multiple of Philox's 4 numbers per counter
  const double p = 0.4;
  for (DType t : {DType::float32, DType::float64}) {
    SCOPED_TRACE(std::string(name(t)));
    const std::vector<double> u = draw(Shape{n}, t, 7);
    std::vector<double> first;
    for (Device d : all_devices()) {
      SCOPED_TRACE(d.str());
      Tensor x = ones({n}, t, d);
      for (int call = 0; call < 2; ++call) {
        Generator gen(7);
        std::vector<double> y = dropout(x, p, true, gen).to_vector<double>();
        if (first.empty()) first = y;
        EXPECT_EQ(y, first) << "call " << call;
      }
      Generator other(8);
      EXPECT_NE(dropout(x, p, true, other).to_vector<double>(), first);
    }
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(first[size_t(i)] == 0.0, u[size_t(i)] < (t == DType::float32 ? float(p) : p))
          << "element " << i << ", u " << u[size_t(i)];
  }
}

// About 1 - p of a large tensor is kept, each kept value x / (1 - p); a generator that goes
// on draws a new mask.
TEST(Dropout, KeepsAboutOneMinusPOfALargeTensor) {
  const int64_t n = 200000;
  for (Device d : all_devices())
    for (double p : {0.1, 0.5, 0.9}) {
      SCOPED_TRACE(d.str() + " p " + std::to_string(p));
      Generator gen(11);
      Tensor x = full({n}, 3.0, DType::float32, d);
      std::vector<float> y = dropout(x, p, true, gen).to_vector<float>();
      const float kept_value = 3.0f * float(1.0 / (1.0 - p));
      int64_t kept = 0;
      for (float v : y) {
        if (v == 0.0f) continue;
        ++kept;
        ASSERT_EQ(v, kept_value);
      }
      // The count is binomial(n, 1 - p): 5 standard deviations, at most 0.0034 of n.
      const double sd = std::sqrt(p * (1 - p) / double(n));
      EXPECT_NEAR(double(kept) / double(n), 1 - p, 5 * sd);
      EXPECT_NE(dropout(x, p, true, gen).to_vector<float>(), y);
    }
}

// backward() multiplies the incoming gradient by the forward's mask / (1 - p): the same draw,
// not a second one (the generator moves by one tensor's counters only).
TEST(Dropout, GradientIsTheMaskOverOneMinusP) {
  const int64_t n = 1000;
  const double p = 0.25;
  std::vector<double> w(static_cast<size_t>(n)), xv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    w[size_t(i)] = 0.5 + 0.001 * double(i);
    xv[size_t(i)] = -1.0 + 0.002 * double(i);
  }
  const std::vector<double> u = draw(Shape{n}, DType::float64, 5);
  for (Device d : all_devices()) {
    SCOPED_TRACE(d.str());
    Generator gen(5);
    Tensor x = from_data(xv, Shape{n}, DType::float64, d).requires_grad_();
    Tensor y = dropout(x, p, true, gen);
    sum(y * from_data(w, Shape{n}, DType::float64, d)).backward();
    EXPECT_EQ(gen.offset(), uint64_t((n + 3) / 4)) << "one draw of n numbers";
    std::vector<double> g = x.grad().to_vector<double>(), yv = y.to_vector<double>();
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      const double mask = u[k] >= p ? 1.0 : 0.0;
      kept += int64_t(mask);
      EXPECT_EQ(g[k], w[k] * (mask * (1.0 / (1.0 - p)))) << i;
      EXPECT_EQ(yv[k], xv[k] * (mask * (1.0 / (1.0 - p)))) << i;
    }
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, n);
  }
}

// Not training, or p == 0: x itself, nothing queued, nothing drawn; no node to record.
TEST(Dropout, EvalModeAndZeroPReturnTheInput) {
  for (Device d : all_devices()) {
    SCOPED_TRACE(d.str());
    Tensor x = from_data({1, -2, 3}, Shape{3}, DType::float32, d).requires_grad_();
    Generator gen(3);
    const uint64_t queued = Engine::get().stats().queued;
    Tensor a = dropout(x, 0.5, false, gen);
    Tensor b = dropout(x, 0.0, true, gen);
    EXPECT_EQ(Engine::get().stats().queued, queued);
    EXPECT_EQ(gen.offset(), 0u);
    EXPECT_EQ(a.id(), x.id());
    EXPECT_EQ(b.id(), x.id());
    EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, -2, 3}));
  }
}

// Refused at the call, in training or not, before anything is queued or drawn.
TEST(DropoutErrors, BadPAndNonFloatingInputsThrowAndQueueNothing) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Device d : all_devices()) {
    SCOPED_TRACE(d.str());
    Tensor x = ones({2, 3}, DType::float32, d);
    Tensor i = ones({4}, DType::int32, d);
    Generator gen(1);
    const uint64_t queued = Engine::get().stats().queued;
    for (bool training : {true, false}) {
      EXPECT_TIDE_ERROR(dropout(x, 1.0, training, gen), "[dropout]", "p must be in [0, 1)", "got 1",
                        "(2, 3) float32");
      EXPECT_TIDE_ERROR(dropout(x, -0.1, training, gen), "[dropout]", "got -0.1", "(2, 3)");
      EXPECT_TIDE_ERROR(dropout(x, 1.5, training, gen), "[dropout]", "got 1.5");
      EXPECT_TIDE_ERROR(dropout(x, nan, training, gen), "[dropout]", "got nan");
      EXPECT_TIDE_ERROR(dropout(i, 0.5, training, gen), "[dropout]", "needs a floating tensor",
                        "(4,) int32");
      EXPECT_TIDE_ERROR(dropout(Tensor(), 0.5, training, gen), "[dropout]", "undefined");
    }
    EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing was queued";
    EXPECT_EQ(gen.offset(), 0u) << "nothing was drawn";
  }
}

}  // namespace
}  // namespace tide
