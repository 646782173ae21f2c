// nn::Module, Sequential, Linear, activations, Dropout.
#include <gtest/gtest.h>

#include <cmath>

#include "fake_gpu.h"
#include "nn/module.h"
#include "nn/serialize.h"
#include "tide.h"

namespace tide::nn {
namespace {

void set_values(const Tensor& p, const std::vector<float>& v) {
  NoGrad ng;
  Tensor(p).copy_(from_vector<float>(v, p.shape()));
}

TEST(NnLinear, ForwardMatchesHandComputation) {
  Linear lin(LinearOptions(3, 2));
  EXPECT_EQ(lin.weight().shape(), Shape({3, 2}));
  EXPECT_EQ(lin.bias().shape(), Shape({2}));
  set_values(lin.weight(), {1, 2, 3, 4, 5, 6});  // W = [[1,2],[3,4],[5,6]]
  set_values(lin.bias(), {0.5f, -1});
  Tensor x = from_vector<float>({1, 0, -1, 2, 1, 0.5f}, {2, 3});
  std::vector<float> y = lin(x).to_vector<float>();
  // row 0: [1-5, 2-6] + b = [-3.5, -5]; row 1: [2+3+2.5, 4+4+3] + b = [8, 10]
  ASSERT_EQ(y.size(), 4u);
  EXPECT_FLOAT_EQ(y[0], -3.5f);
  EXPECT_FLOAT_EQ(y[1], -5.0f);
  EXPECT_FLOAT_EQ(y[2], 8.0f);
  EXPECT_FLOAT_EQ(y[3], 10.0f);
}

TEST(NnLinear, NoBiasAndGradients) {
  Linear lin(LinearOptions(4, 3).bias(false).init(Init::kaiming_normal));
  EXPECT_FALSE(lin.bias().defined());
  ASSERT_EQ(lin.named_parameters().size(), 1u);
  EXPECT_TRUE(lin.weight().requires_grad());
  Tensor x = ones({5, 4});
  sum(lin(x)).backward();
  ASSERT_TRUE(lin.weight().grad().defined());
  // d sum(x W) / dW = x^T 1 = 5 everywhere.
  for (float g : lin.weight().grad().to_vector<float>()) EXPECT_FLOAT_EQ(g, 5.0f);
  lin.zero_grad();
  EXPECT_FALSE(lin.weight().grad().defined());
}

TEST(NnLinear, BadInputThrowsWithShapes) {
  Linear lin(3, 2);
  try {
    lin(ones({2, 4}));
    FAIL() << "expected tide::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[Linear]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(2, 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lin(ones({3})), Error);
  EXPECT_THROW(lin(ones({2, 3}, DType::float64)), Error);
  EXPECT_THROW(Linear(0, 2), Error);
}

TEST(NnSequential, NamedParametersNamesAndShapes) {
  auto net = std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(),
      std::make_shared<Linear>(LinearOptions(8, 2).bias(false))});
  auto np = net->named_parameters();
  ASSERT_EQ(np.size(), 3u);
  EXPECT_EQ(np[0].first, "0.weight");
  EXPECT_EQ(np[0].second.shape(), Shape({4, 8}));
  EXPECT_EQ(np[1].first, "0.bias");
  EXPECT_EQ(np[1].second.shape(), Shape({8}));
  EXPECT_EQ(np[2].first, "2.weight");
  EXPECT_EQ(np[2].second.shape(), Shape({8, 2}));
  EXPECT_EQ(net->parameters().size(), 3u);
  // Handles share the impl with the module's parameters.
  EXPECT_EQ(np[0].second.id(), std::static_pointer_cast<Linear>((*net)[0])->weight().id());
  EXPECT_EQ(net->forward(ones({5, 4})).shape(), Shape({5, 2}));

  Sequential outer;
  outer.push_back(net);
  outer.push_back(std::make_shared<Tanh>());
  EXPECT_EQ(outer.named_parameters()[2].first, "0.2.weight");
}

TEST(NnModule, RegistrationErrors) {
  Module m;
  m.register_parameter("w", ones({2}));
  EXPECT_THROW(m.register_parameter("w", ones({2})), Error);
  EXPECT_THROW(m.register_parameter("a.b", ones({2})), Error);
  EXPECT_THROW(m.register_parameter("", ones({2})), Error);
  EXPECT_THROW(m.register_parameter("i", ones({2}, DType::int64)), Error);
  EXPECT_THROW(m.register_module("w", std::make_shared<ReLU>()), Error);
  EXPECT_THROW(m.register_module<Module>("x", nullptr), Error);
  EXPECT_THROW(m.forward(ones({1})), Error);
}

TEST(NnModule, TrainEvalPropagates) {
  auto inner = std::make_shared<Sequential>();
  auto drop = std::make_shared<Dropout>(0.5);
  inner->push_back(drop);
  Sequential outer;
  outer.push_back(inner);
  EXPECT_TRUE(outer.is_training());
  EXPECT_TRUE(drop->is_training());
  outer.eval();
  EXPECT_FALSE(outer.is_training());
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE(drop->is_training());
  outer.train();
  EXPECT_TRUE(drop->is_training());
  outer.train(false);
  EXPECT_FALSE(drop->is_training());
}

TEST(NnActivations, MatchFormulas) {
  Tensor x = from_vector<float>({-2, -0.5f, 0, 0.5f, 2}, {5});
  auto r = ReLU()(x).to_vector<float>();
  auto s = Sigmoid()(x).to_vector<float>();
  auto t = Tanh()(x).to_vector<float>();
  auto xv = x.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_FLOAT_EQ(r[i], std::max(0.0f, xv[i]));
    EXPECT_NEAR(s[i], 1.0 / (1.0 + std::exp(-xv[i])), 1e-6);
    EXPECT_NEAR(t[i], std::tanh(xv[i]), 1e-6);
  }
}

TEST(NnDropout, StatisticsInTrainingIdentityInEval) {
  manual_seed(123);
  const double p = 0.3;
  Dropout d(p);
  const int64_t n = 100000;
  Tensor x = ones({n});
  std::vector<float> y = d(x).to_vector<float>();
  int64_t zeros_count = 0;
  for (float v : y) {
    if (v == 0.0f) ++zeros_count;
    else EXPECT_NEAR(v, 1.0 / (1.0 - p), 1e-6);
  }
  double frac = double(zeros_count) / double(n);
  EXPECT_NEAR(frac, p, 0.01);  // sd is ~0.0015
  // A second call draws new counters: a different mask.
  std::vector<float> y2 = d(x).to_vector<float>();
  EXPECT_NE(y, y2);

  d.eval();
  Tensor z = d(x);
  EXPECT_EQ(z.id(), x.id());
  EXPECT_EQ(z.to_vector<float>(), x.to_vector<float>());
}

TEST(NnDropout, RejectsBadP) {
  EXPECT_THROW(Dropout(1.0), Error);
  EXPECT_THROW(Dropout(-0.1), Error);
  EXPECT_THROW(Dropout(std::nan("")), Error);
  Dropout zero(0.0);
  Tensor x = ones({4});
  EXPECT_EQ(zero(x).to_vector<float>(), x.to_vector<float>());
}

// ---- to(device) -------------------------------------------------------------------------------

std::shared_ptr<Sequential> small_net() {
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(3, 4), std::make_shared<ReLU>(),
      std::make_shared<Linear>(LinearOptions(4, 2).bias(false))});
}

struct ParamSnapshot {
  std::vector<uintptr_t> ids;
  std::vector<const Storage*> storages;
  std::vector<std::vector<float>> values;
};
ParamSnapshot snapshot(const Module& m) {
  ParamSnapshot s;
  for (const Tensor& p : m.parameters()) {
    s.ids.push_back(p.id());
    s.storages.push_back(p.storage());
    s.values.push_back(p.to_vector<float>());
    EXPECT_TRUE(p.device().is_cpu());
  }
  return s;
}
void expect_same(const ParamSnapshot& a, const ParamSnapshot& b) {
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.storages, b.storages);
  EXPECT_EQ(a.values, b.values);
}

TEST(NnModuleTo, CpuToCpuIsANoOp) {
  auto net = small_net();
  ParamSnapshot before = snapshot(*net);
  wait_all();
  uint64_t queued = Engine::get().stats().queued;
  Module& r = net->to(Device::cpu());
  EXPECT_EQ(&r, net.get());
  EXPECT_EQ(Engine::get().stats().queued, queued) << "to(cpu) queued work";
  expect_same(before, snapshot(*net));
  // A submodule alone, and a module without parameters.
  EXPECT_EQ(&(*net)[0]->to(Device::cpu()), (*net)[0].get());
  ReLU relu;
  EXPECT_EQ(&relu.to(Device::cpu()), &relu);
  EXPECT_EQ(net->to(Device::cpu()).forward(ones({5, 3})).shape(), Shape({5, 2}));
}

TEST(NnModuleTo, AnUnusableDeviceThrowsAndChangesNothing) {
  // cuda:7 is neither a real GPU here (tests run on machines with at most a few) nor one
  // of the suites' fakes.
  auto net = small_net();
  ParamSnapshot before = snapshot(*net);
  try {
    net->to(Device::cuda(7));
    FAIL() << "expected tide::Error";
  } catch (const Error& e) {
    std::string w = e.what();
    for (const char* part : {"[to]", "Sequential", "3 parameters", "cuda:7", "unchanged"})
      EXPECT_NE(w.find(part), std::string::npos) << "missing '" << part << "' in: " << w;
  }
  EXPECT_THROW(net->to(Device::cuda(6)), Error);
  ReLU relu;  // nothing to move, but the device is still refused
  EXPECT_THROW(relu.to(Device::cuda(7)), Error);
  expect_same(before, snapshot(*net));
  // Still usable where it was: forward, backward.
  Tensor loss = sum(net->forward(ones({2, 3})));
  loss.backward();
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.grad().defined());
  EXPECT_TRUE(std::isfinite(loss.item<float>()));
}

// On a GPU (the recording fake, cuda:8): parameters move in place (same handles), a
// training step there gives the CPU's numbers, and moving back returns them.
TEST(NnModuleTo, MovesParametersInPlaceAndTrainsThere) {
  test_util::fake_gpu(8);
  const Device gpu = Device::cuda(8);
  auto cpu_net = small_net(), gpu_net = small_net();
  std::vector<Tensor> handles = gpu_net->parameters();
  {
    NoGrad ng;  // the same parameters in both
    for (size_t i = 0; i < handles.size(); ++i) handles[i].copy_(cpu_net->parameters()[i]);
  }
  EXPECT_EQ(&gpu_net->to(gpu), gpu_net.get());
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(handles[i].device(), gpu) << "the caller's handle sees the move";
    EXPECT_TRUE(handles[i].requires_grad());
    EXPECT_EQ(handles[i].id(), gpu_net->parameters()[i].id());
  }
  Tensor x = from_data({1, -2, 3, 0.5, 2, -1}, Shape{2, 3});
  Tensor loss_cpu = sum(cpu_net->forward(x));
  Tensor loss_gpu = sum(gpu_net->forward(x.to(gpu)));
  EXPECT_EQ(loss_gpu.device(), gpu);
  loss_cpu.backward();
  loss_gpu.backward();
  EXPECT_NEAR(loss_gpu.item<float>(), loss_cpu.item<float>(), 1e-5);
  std::vector<Tensor> pc = cpu_net->parameters(), pg = gpu_net->parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    ASSERT_TRUE(pg[i].grad().defined());
    EXPECT_EQ(pg[i].grad().device(), gpu);
    std::vector<float> a = pc[i].grad().to_vector<float>(), b = pg[i].grad().to_vector<float>();
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-5) << i << "," << j;
  }
  // On the GPU, Linear + ReLU ran as one `linear` op (the GEMM's bias+ReLU epilogue).
  profiler::start();
  (void)gpu_net->forward(x.to(gpu)).to_vector<float>();
  profiler::stop();
  int linear_ops = 0, relu_ops = 0;
  for (const auto& r : profiler::ops()) {
    linear_ops += std::string(r.op) == "linear";
    relu_ops += std::string(r.op) == "relu";
  }
  EXPECT_EQ(linear_ops, 1);
  EXPECT_EQ(relu_ops, 0);
  gpu_net->to(Device::cpu());
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_TRUE(handles[i].device().is_cpu());
    EXPECT_EQ(handles[i].to_vector<float>(), pc[i].to_vector<float>());
    EXPECT_FALSE(handles[i].grad().defined()) << "the move drops gradients";
  }
}

// Issue 11 item 13: one failed minibatch used to poison the parameters for ever, and
// nn::load returned normally while the module stayed broken. Loading a checkpoint
// replaces every parameter's failure.
TEST(NnModule, LoadingACheckpointRepairsFailedParameters) {
  Generator gen(3);
  nn::Linear m(nn::LinearOptions(3, 2), gen);
  const std::string path = ::testing::TempDir() + "tide_repair.safetensors";
  nn::save(m, path);
  const std::vector<float> w0 = m.weight().to_vector();
  for (Tensor p : m.parameters()) debug::fail(ones({1}), p, "failed minibatch");
  for (const Tensor& p : m.parameters()) EXPECT_TRUE(p.failed());
  nn::load(m, path);
  for (const Tensor& p : m.parameters()) EXPECT_FALSE(p.failed()) << p.failure_message();
  EXPECT_EQ(m.weight().to_vector(), w0);
  EXPECT_NO_THROW(m.forward(ones({1, 3})).to_vector());
  try {
    wait_all();  // the failures of the failed minibatch are still reported once
  } catch (const Error&) {
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tide::nn
