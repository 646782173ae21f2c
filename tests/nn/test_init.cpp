// Initialiser statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/init.h"
#include "tide.h"

namespace tide::nn {
namespace {

struct Stats {
  double mean = 0, sd = 0, maxabs = 0;
};

Stats stats(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) {
    s.sd += (x - s.mean) * (x - s.mean);
    s.maxabs = std::max(s.maxabs, std::abs(x));
  }
  s.sd = std::sqrt(s.sd / double(v.size()));
  return s;
}

TEST(NnInit, Fans) {
  Fans f = compute_fans({3, 5});
  EXPECT_EQ(f.in, 3);
  EXPECT_EQ(f.out, 5);
  f = compute_fans({7});
  EXPECT_EQ(f.in, 7);
  EXPECT_EQ(f.out, 7);
  EXPECT_THROW(compute_fans(Shape{}), Error);
  EXPECT_THROW(compute_fans({0, 3}), Error);
  EXPECT_THROW(xavier_uniform({2, 2}, DType::int32), Error);
}

TEST(NnInit, XavierUniformBoundAndStd) {
  manual_seed(1);
  Tensor w = xavier_uniform({200, 300});
  EXPECT_FALSE(w.requires_grad());
  const double b = std::sqrt(6.0 / 500.0);
  Stats s = stats(w);
  EXPECT_LE(s.maxabs, b + 1e-6);
  EXPECT_GT(s.maxabs, 0.99 * b);
  EXPECT_NEAR(s.sd, b / std::sqrt(3.0), 0.03 * b);
  EXPECT_NEAR(s.mean, 0.0, 0.01 * b);
}

TEST(NnInit, XavierNormalStd) {
  manual_seed(2);
  Stats s = stats(xavier_normal({200, 300}, DType::float64));
  const double sd = std::sqrt(2.0 / 500.0);
  EXPECT_NEAR(s.sd, sd, 0.03 * sd);
  EXPECT_NEAR(s.mean, 0.0, 0.02 * sd);
}

TEST(NnInit, KaimingStd) {
  manual_seed(3);
  const double sd = std::sqrt(2.0 / 400.0);
  Stats n = stats(kaiming_normal({400, 150}));
  EXPECT_NEAR(n.sd, sd, 0.03 * sd);
  Stats u = stats(kaiming_uniform({400, 150}));
  EXPECT_NEAR(u.sd, sd, 0.03 * sd);
  EXPECT_LE(u.maxabs, std::sqrt(6.0 / 400.0) + 1e-6);
}

TEST(NnInit, ZerosAndDispatch) {
  Tensor z = initialize(Init::zeros, {3, 4});
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(initialize(Init::xavier_normal, {3, 4}, DType::float64).dtype(), DType::float64);
}

}  // namespace
}  // namespace tide::nn
