// Tensor::to: copies between the CPU and a GPU (a recording fake here, cuda:8; the real
// GPU in tests/cuda/), in both directions and between two GPUs, every dtype, views with
// offsets, empty tensors, the gradient, and errors for devices this process lacks.
#include "fake_gpu.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Check;
using test_util::fake_gpu;

Device gpu() {
  fake_gpu(8);
  return Device::cuda(8);
}

TIDE_OP_TEST(Copy, RoundTripsEveryDtype, {OpId::to, Check::value}) {
  for (DType dt : {DType::float32, DType::float64, DType::int32, DType::int64}) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = arange(0.0, 1000.0, 1.0, dt);
    Tensor y = x.to(gpu());
    EXPECT_EQ(y.device(), gpu());
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.shape(), x.shape());
    Tensor back = y.to(Device::cpu());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_EQ(back.to_vector<double>(), x.to_vector<double>());
    EXPECT_EQ(y.to_vector<double>(), x.to_vector<double>()) << "host read of a GPU tensor";
  }
}

TEST(Copy, ViewsEmptyTensorsAndSameDevice) {
  Tensor x = arange(0.0, 12.0, 1.0).reshape({4, 3});
  Tensor row = x[2].to(gpu());  // a view with an offset
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{6, 7, 8}));
  Tensor e = zeros({0, 3}).to(gpu());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.to(Device::cpu()).numel(), 0);
  Tensor same = x.to(Device::cpu());
  EXPECT_EQ(same.id(), x.id()) << "to() the tensor's own device returns the tensor";
}

TEST(Copy, BetweenTwoGpus) {
  fake_gpu(10);
  Tensor x = arange(0.0, 5.0, 1.0).to(gpu());
  Tensor y = x.to(Device::cuda(10));
  EXPECT_EQ(y.device(), Device::cuda(10));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
}

TEST(Copy, QueuedAndOrderedAfterTheWriter) {
  Tensor x = zeros({3});
  x.add_(ones({3}));  // queued write, then the copy must see it
  Tensor y = x.to(gpu());
  x.add_(ones({3}));  // a later write must not leak into the copy
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

TIDE_OP_TEST(Copy, Gradient, {OpId::to, Check::grad}) {
  Tensor x = from_data({1, -2, 3}, Shape{3}, DType::float64).requires_grad_();
  Tensor y = x.to(gpu());
  Tensor z = (y * y).to(Device::cpu());
  ASSERT_TRUE(z.requires_grad());
  sum(z).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), Device::cpu());
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, -4, 6}));
}

TEST(Copy, ErrorsNameTheDevice) {
  EXPECT_TIDE_ERROR(ones({2}).to(Device::cuda(6)), "[to]", "cuda:6");
  EXPECT_TIDE_ERROR(Tensor().to(gpu()), "[to]");
}

}  // namespace
}  // namespace tide
