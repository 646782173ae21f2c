// Autocast (ops/autocast.h): the guard and its nesting, each row of the policy (GEMM-like
// ops low, softmax/norm/loss/reductions float32, binary ops promoted), the per-guard cache
// of parameter casts, gradients keeping the forward's dtypes, checkpoint's recompute under
// the first run's policy, and a traced autocast step equal to eager bit for bit. On the CPU
// and on case_devices() (the recording fake GPU here, cuda:0 in tide_cuda_tests).
#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "error_of.h"
#include "nn/loss.h"
#include "tests/ops/op_harness.h"
#include "tide.h"

namespace tide {
namespace {

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  for (Device g : test::case_devices()) d.push_back(g);
  return d;
}

Tensor on(const std::vector<double>& v, const Shape& s, DType dt, Device d) {
  return from_data(v, s, dt).to(d);
}

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

TEST(Autocast, TheGuardNestsAndRefusesNonSixteenBitTypes) {
  EXPECT_TIDE_ERROR(Autocast(DType::float32), "[autocast]", "bfloat16 or float16", "float32");
  EXPECT_FALSE(autocast::active());
  {
    Autocast outer(DType::bfloat16);
    EXPECT_EQ(autocast::active(), DType::bfloat16);
    {
      Autocast inner(DType::float16);
      EXPECT_EQ(autocast::active(), DType::float16);
      {
        Autocast off(DType::bfloat16, false);
        EXPECT_FALSE(autocast::active());
      }
      EXPECT_EQ(autocast::active(), DType::float16);
    }
    EXPECT_EQ(autocast::active(), DType::bfloat16);
  }
  EXPECT_FALSE(autocast::active());
}

// Two floating dtypes meet at the wider under autocast (outside, mixing them is refused); an
// in-place op keeps its own dtype.
TEST(Autocast, BinaryOpsPromoteAndInPlaceOpsKeepTheirDtype) {
  for (Device d : devices()) {
    Tensor a = on({1.5, -2.0, 3.0}, {3}, DType::float32, d);
    Tensor b = on({0.25, 1.0 / 3.0, 100.0}, {3}, DType::bfloat16, d);
    EXPECT_ANY_THROW(add(a, b));
    Autocast amp(DType::bfloat16);
    Tensor y = add(a, b);
    EXPECT_EQ(y.dtype(), DType::float32) << d.str();
    EXPECT_EQ(host(y), host(add(a, cast(b, DType::float32)))) << d.str();
    Tensor c = clone(a);
    c.add_(b);
    EXPECT_EQ(c.dtype(), DType::float32);
    EXPECT_EQ(host(c), host(y)) << d.str();
  }
}

// softmax, log_softmax, the reductions, exp/log/pow and the losses run in float32.
TEST(Autocast, FloatOpsRunInFloat32) {
  for (Device d : devices()) {
    Tensor x = on({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3}, DType::bfloat16, d);
    Tensor xf = cast(x, DType::float32);
    Autocast amp(DType::bfloat16);
    for (auto [name, got, want] : std::vector<std::tuple<const char*, Tensor, Tensor>>{
             {"softmax", softmax(x), softmax(xf)},
             {"log_softmax", log_softmax(x), log_softmax(xf)},
             {"sum", sum(x), sum(xf)},
             {"mean", mean(x, 1), mean(xf, 1)},
             {"sum_squares", sum_squares(x), sum_squares(xf)},
             {"exp", exp(x), exp(xf)},
             {"pow", pow(x, 2.0), pow(xf, 2.0)}}) {
      EXPECT_EQ(got.dtype(), DType::float32) << name << " on " << d.str();
      EXPECT_EQ(host(got), host(want)) << name << " on " << d.str();
    }
    Tensor labels = from_data({2.0, 0.0}, {2}, DType::int64).to(d);
    Tensor loss = nn::cross_entropy(x, labels);
    EXPECT_EQ(loss.dtype(), DType::float32);
    EXPECT_EQ(host(loss), host(nn::cross_entropy(xf, labels))) << d.str();
  }
}

// A leaf that requires grad is cast once per outermost guard; other tensors each time; an
// optimizer step or the guard's end drops the cache.
TEST(Autocast, ParametersAreCastOncePerGuard) {
  Tensor w = from_data({1.0, 2.0}, {2});
  w.requires_grad_();
  Tensor x = from_data({3.0, 4.0}, {2});
  uintptr_t first = 0;
  {
    Autocast amp(DType::bfloat16);
    Tensor w1 = w, w2 = w, x1 = x, x2 = x;
    EXPECT_TRUE(autocast::lower({&w1, &x1}));
    {
      Autocast inner(DType::bfloat16);
      EXPECT_TRUE(autocast::lower({&w2, &x2}));
    }
    EXPECT_EQ(w1.dtype(), DType::bfloat16);
    EXPECT_EQ(w1.id(), w2.id()) << "the parameter was cast twice in one guard";
    EXPECT_NE(x1.id(), x2.id());
    first = w1.id();
    autocast::clear_cache();
    Tensor w3 = w;
    autocast::lower({&w3});
    EXPECT_NE(w3.id(), first);
    Tensor bf = w1;
    EXPECT_FALSE(autocast::lower({&bf})) << "a bfloat16 tensor needs no cast";
  }
  Tensor w4 = w;
  EXPECT_FALSE(autocast::lower({&w4})) << "no guard, no cast";
}

// backward() inside the guard gives the gradients of backward() outside it, in the forward's
// dtypes.
TEST(Autocast, GradientsKeepTheForwardsDtypes) {
  auto grads = [](bool inside) {
    Tensor a = from_data({0.5, -1.0, 2.0}, {3});
    Tensor b = from_data({0.25, 0.75, -1.5}, {3}, DType::bfloat16);
    a.requires_grad_();
    b.requires_grad_();
    Tensor loss;
    {
      Autocast amp(DType::bfloat16);
      loss = sum(softmax(mul(a, b)));
      if (inside) loss.backward();
    }
    if (!inside) loss.backward();
    EXPECT_EQ(a.grad().dtype(), DType::float32);
    EXPECT_EQ(b.grad().dtype(), DType::bfloat16);
    return std::pair(a.grad().to_vector<float>(), b.grad().to_vector<float>());
  };
  EXPECT_EQ(grads(true), grads(false));
}

// The recompute runs under the first run's policy although backward() suspends the
// caller's: softmax of a bfloat16 value is float32 both times, and the gradient is the one
// without checkpointing.
TEST(Autocast, CheckpointRecomputesUnderTheFirstRunsPolicy) {
  auto fn = [](const Tensor& x) { return softmax(cast(x, DType::bfloat16)); };
  auto grad_of = [&](bool with_checkpoint) {
    Tensor x = from_data({0.5, -1.0, 2.0, 0.25}, {2, 2});
    x.requires_grad_();
    Tensor y;
    {
      Autocast amp(DType::bfloat16);
      y = with_checkpoint ? checkpoint(fn, x) : fn(x);
    }
    EXPECT_EQ(y.dtype(), DType::float32);
    sum(mul(y, from_data({1.0, 2.0, 3.0, 4.0}, {2, 2}))).backward();
    return x.grad().to_vector<float>();
  };
  EXPECT_EQ(grad_of(true), grad_of(false));
}

}  // namespace
}  // namespace tide
