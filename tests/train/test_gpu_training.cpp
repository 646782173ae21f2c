// Training on a GPU, run on a recording fake (tests/fake_gpu.h: cuda:8 runs the CPU kernels
// in stream order): the synthetic and IDX sources put their batches on the device, the
// Trainer trains there with the same losses as on the CPU and records the GPU allocator's
// bytes, measure_step_bytes holds the GPU's stream back, and traced mode is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "error_of.h"
#include "fake_gpu.h"
#include "idx_files.h"
#include "nn/nn.h"
#include "tide.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/trainer.h"

using namespace tide;
using namespace tide::train;
namespace fs = std::filesystem;

namespace {

using tide::test_util::error_of;

Device gpu() {
  tide::test_util::fake_gpu(8);
  // Start its runtime: until then op_supported() does not know that the installed fake
  // runs host kernels, and a creation op as the device's first use would be refused.
  cuda::DeviceRuntime::get(8);
  return Device::cuda(8);
}

// test_trainer.cpp's tiny regression run (Linear(8, 1), 32x8 synthetic data, batch 8, SGD),
// on `device`: the model is moved before the optimizer is built, the data made there.
struct Tiny {
  explicit Tiny(Device device)
      : source(SyntheticOptions().examples(32).features(8).batch_size(8).seed(7).device(device)) {
    model->to(device);
    opt = std::make_unique<SGD>(model->parameters(), SGDOptions(0.05));
    trainer = std::make_unique<Trainer>(*model, nn::l2_loss, *opt, source);
  }
  TrainResult run(Policy p, int batches, Mode mode = Mode::eager) {
    TrainerOptions o;
    o.batches = batches;
    o.policy = p;
    o.mode = mode;
    return trainer->run(o);
  }

  Generator gen{1234};
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(nn::LinearOptions(8, 1), gen);
  SyntheticSource source;
  std::unique_ptr<SGD> opt;
  std::unique_ptr<Trainer> trainer;
};

}  // namespace

TEST(GpuData, SyntheticBatchesAreMadeOnTheDeviceWithTheCpuNumbers) {
  const Device d = gpu();
  auto opts = SyntheticOptions().examples(12).features(5).batch_size(8).seed(3);
  SyntheticSource cpu(opts), dev(SyntheticOptions(opts).device(d));
  for (int b = 0; b < 2; ++b) {
    std::optional<Batch> c = cpu.next_batch(), g = dev.next_batch();
    ASSERT_TRUE(c && g);
    EXPECT_EQ(g->x.device(), d);
    EXPECT_EQ(g->y.device(), d);
    EXPECT_EQ(g->x.shape(), c->x.shape());
    EXPECT_EQ(g->x.to_vector<float>(), c->x.to_vector<float>()) << "batch " << b;  // Philox
    EXPECT_EQ(g->y.to_vector<float>(), c->y.to_vector<float>()) << "batch " << b;
  }
  EXPECT_FALSE(dev.next_batch());
}

// Resident (the default on a GPU: the data set on the device, batches gathered there) and
// copied (built on the host, then Tensor::to): the CPU's batches either way.
TEST(GpuData, IdxBatchesAreGatheredOnOrCopiedToTheDevice) {
  const Device d = gpu();
  fs::path dir = fs::temp_directory_path() / ("tide_idx_gpu_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const std::vector<uint8_t>& bytes) {
    std::ofstream((dir / name).string(), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };
  write("train-images-idx3-ubyte", test_util::images_bytes(10, 2, 3));
  write("train-labels-idx1-ubyte", test_util::labels_bytes(10));

  for (bool flatten : {true, false})
    for (bool resident : {true, false}) {
      SCOPED_TRACE(std::string(resident ? "resident" : "copied") + (flatten ? ", flat" : ", 2-D"));
      auto opts = IdxOptions()
                      .dir(dir.string())
                      .batch_size(4)
                      .shuffle(true)
                      .seed(5)
                      .normalize(0.5, 0.25)
                      .flatten(flatten);
      IdxSource cpu(opts), dev(IdxOptions(opts).device(d).resident(resident));
      for (uint64_t epoch : {0, 1}) {
        cpu.reset(epoch);
        dev.reset(epoch);
        int batches = 0;
        while (std::optional<Batch> c = cpu.next_batch()) {
          std::optional<Batch> g = dev.next_batch();
          ASSERT_TRUE(g);
          EXPECT_EQ(g->x.device(), d);
          EXPECT_EQ(g->y.device(), d);
          EXPECT_EQ(g->x.shape(), c->x.shape());
          EXPECT_EQ(g->x.to_vector<float>(), c->x.to_vector<float>()) << "batch " << batches;
          EXPECT_EQ(g->y.to_vector<int64_t>(), c->y.to_vector<int64_t>()) << "batch " << batches;
          ++batches;
        }
        EXPECT_EQ(batches, 3);  // 4 + 4 + 2
        EXPECT_FALSE(dev.next_batch());
      }
    }
  fs::remove_all(dir);
}

TEST(GpuData, AGpuThisProcessCannotUseIsRefusedAtConstruction) {
  if (cuda::available(15)) GTEST_SKIP() << "cuda:15 exists here";
  std::string e = error_of([] { SyntheticSource s(SyntheticOptions().device(Device::cuda(15))); });
  EXPECT_NE(e.find("[synthetic]"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda:15"), std::string::npos) << e;
  e = error_of([] { IdxSource s(IdxOptions().dir("/nonexistent").device(Device::cuda(15))); });
  EXPECT_NE(e.find("[idx]"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda:15"), std::string::npos) << e;
}

// The same run on the fake GPU and on the CPU: the same losses (the fake runs the CPU
// kernels), and the memory records are the GPU allocator's, not the CPU's.
TEST(GpuTrainer, TrainsLikeTheCpuAndRecordsTheGpuAllocator) {
  const Device d = gpu();
  const int batches = 6;
  Tiny on_cpu(Device::cpu());
  TrainResult rc = on_cpu.run(Policy::per_batch(), batches);

  // Hold 32 MiB on the CPU while the GPU run goes: the records must not see it.
  const size_t held = size_t(32) << 20;
  Tensor ballast = zeros(Shape{int64_t(held / sizeof(float))});
  ballast.wait_to_read();
  Allocator& galloc = Allocator::get(d);
  Tiny on_gpu(d);
  EXPECT_EQ(on_gpu.trainer->device(), d);
  EXPECT_EQ(on_gpu.model->weight().device(), d);
  wait_all();
  Engine::get().reclaim();
  const AllocatorStats before = galloc.stats();
  TrainResult rg = on_gpu.run(Policy::per_batch(), batches);
  EXPECT_EQ(rg.device, d);
  EXPECT_EQ(rc.device, Device::cpu());
  ASSERT_EQ(rg.steps.size(), size_t(batches));
  for (int i = 0; i < batches; ++i) {
    EXPECT_TRUE(std::isfinite(rg.steps[size_t(i)].loss)) << i;
    EXPECT_NEAR(rg.steps[size_t(i)].loss, rc.steps[size_t(i)].loss, 1e-4) << "minibatch " << i + 1;
  }
  EXPECT_NEAR(rg.final_loss, rc.final_loss, 1e-4);
  EXPECT_LT(rg.final_loss, rg.steps.front().loss);  // it trains

  // The records are the GPU allocator's: it served every minibatch, its active bytes
  // before the run are the recorded baseline, and the CPU's ballast is in none of them.
  EXPECT_GE(galloc.stats().num_allocs - before.num_allocs, uint64_t(batches) * 2);  // x, y
  EXPECT_EQ(rg.baseline_active, before.active_bytes);
  EXPECT_GT(rg.peak_active, rg.baseline_active);  // the queued minibatch was on the GPU
  EXPECT_LT(rg.peak_active, held);
  EXPECT_GE(Allocator::get().stats().active_bytes, held);
  for (const StepRecord& s : rg.steps) EXPECT_GT(s.allocator_active, 0u);

  // The CSV names the device.
  std::string csv = rg.csv();
  EXPECT_NE(csv.find(",mode,device,alloc\n"), std::string::npos) << csv.substr(0, 200);
  const std::string row_tail =
      std::string(",eager,cuda:8,") + alloc_name(Engine::get().allocation()) + "\n";
  EXPECT_NE(csv.find(row_tail), std::string::npos) << csv.substr(0, 400);

  // Weights agree too (read back through pinned staging).
  std::vector<float> wc = on_cpu.model->weight().to_vector<float>();
  std::vector<float> wg = on_gpu.model->weight().to_vector<float>();
  ASSERT_EQ(wc.size(), wg.size());
  for (size_t i = 0; i < wc.size(); ++i) EXPECT_NEAR(wg[i], wc[i], 1e-5) << i;
}

TEST(GpuTrainer, NonePolicyAndMeasureStepBytesOnTheGpu) {
  const Device d = gpu();
  Tiny t(d);
  TrainResult r = t.run(Policy::none(), 5);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_EQ(r.device, d);
  if (Engine::get().synchronous()) GTEST_SKIP() << "synchronous engine: no gate";
  // The gate holds the GPU stream back: the step's GPU storages are all held at once (with
  // outputs allocated at enqueue; at execution a queued step holds almost nothing).
  const AllocationGuard at_enqueue(Allocation::at_enqueue);
  Tiny probe(d);
  EXPECT_GT(probe.trainer->measure_step_bytes(), 0u);
}

// Traced mode on a GPU: each step after the warm-up replays as one CUDA graph, and the run
// trains exactly as eager does on the same device.
TEST(GpuTrainer, TracedModeOnTheGpuEqualsEager) {
  const Device d = gpu();
  Tiny eager(d), traced(d);
  TrainResult re = eager.run(Policy::per_batch(), 6);
  TrainResult rt = traced.run(Policy::per_batch(), 6, Mode::traced);
  EXPECT_EQ(rt.mode, Mode::traced);
  EXPECT_EQ(rt.device, d);
  ASSERT_EQ(re.steps.size(), rt.steps.size());
  for (size_t i = 0; i < re.steps.size(); ++i)
    EXPECT_EQ(re.steps[i].loss, rt.steps[i].loss) << "minibatch " << i;
  EXPECT_EQ(eager.model->weight().to_vector<float>(), traced.model->weight().to_vector<float>());
  trace::FunctionStats s = traced.trainer->traced_stats();
  EXPECT_GE(s.replays, 4);
  EXPECT_EQ(s.graph_fallback, "");
  EXPECT_GT(s.graph_nodes, size_t(s.kernels));
  const AllocationGuard at_enqueue(Allocation::at_enqueue);  // as above
  EXPECT_GT(traced.trainer->measure_step_bytes(Mode::traced), 0u);
}
