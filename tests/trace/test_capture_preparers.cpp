// Library handles before a CUDA graph captures (ops/kernel_entry.h, prepare_capture): a
// kernel that makes its thread's handle on first use (cuDNN's, in ops/cuda/conv.cu) would
// make it inside the capture, which CUDA refuses (creating a handle allocates), and the
// graph would fall back to launching node by node. The graph builder runs the op's
// preparer first, on the capturing thread. On the recording fake, which refuses handle
// creation inside a capture as CUDA does.
#include <gtest/gtest.h>

#include <vector>

#include "device_graph_support.h"
#include "ops/kernel_entry.h"
#include "trace/cuda/device_graph.h"

namespace tide {
namespace {

using namespace device_graph_test;

// This test's stand-in for a thread's library handle, made on first use as conv.cu does.
bool g_handle_made = false;
void handle_on_first_use(const KernelContext& ctx) {
  if (g_handle_made) return;
  (void)ctx.api->create_blas();  // the fake's handle creation: refused inside a capture
  g_handle_made = true;
}

// Sets op's preparer for one test and puts the previous one back.
struct ScopedPreparer {
  OpId op;
  kernels::CapturePreparer before;
  ScopedPreparer(OpId op, kernels::CapturePreparer fn)
      : op(op), before(kernels::set_capture_preparer(op, fn)) {}
  ~ScopedPreparer() { kernels::set_capture_preparer(op, before); }
};

// A one-node graph whose kernel needs the handle; the result of building it.
std::string build_a_conv_node(size_t* nodes) {
  trace::Graph g;
  g.device = Device::cuda(kGpu);
  trace::Node node;
  node.op = op_name(OpId::conv2d);
  node.kernel = [](const KernelContext& c) { handle_on_first_use(c); };
  g.nodes.push_back(std::move(node));
  g.deps.successors = {{}};
  g.deps.predecessors = {0};
  KernelContext ctx{Device::cuda(kGpu)};
  ctx.api = &fake();
  cuda::GraphHandle h = fake().graph_create();
  std::vector<cuda::GraphNodeHandle> sinks;
  std::string why = trace::add_planned_nodes(g, h, {}, ctx, &sinks);
  *nodes = fake().graph_node_count(h);
  fake().graph_destroy(h);
  return why;
}

TEST(CapturePreparers, AHandleMadeOnFirstUseInsideACaptureCostsTheGraph) {
  ScopedPreparer none(OpId::conv2d, nullptr);
  g_handle_made = false;
  size_t nodes = 0;
  const std::string why = build_a_conv_node(&nodes);
  EXPECT_NE(why.find("cublasLtCreate failed"), std::string::npos) << why;
  EXPECT_NE(why.find("conv2d"), std::string::npos) << "the failure names the node: " << why;
  EXPECT_EQ(nodes, 0u);
}

TEST(CapturePreparers, TheOpsPreparerMakesTheHandleBeforeTheCapture) {
  ScopedPreparer make(OpId::conv2d, handle_on_first_use);
  g_handle_made = false;
  const size_t handles = fake().count(FakeDevice::CallKind::create_blas);
  size_t nodes = 0;
  EXPECT_EQ(build_a_conv_node(&nodes), "");
  EXPECT_EQ(nodes, 1u);
  EXPECT_TRUE(g_handle_made);
  EXPECT_EQ(fake().count(FakeDevice::CallKind::create_blas) - handles, 1u);
  EXPECT_EQ(build_a_conv_node(&nodes), "") << "a later build finds the handle made";
  EXPECT_EQ(fake().count(FakeDevice::CallKind::create_blas) - handles, 1u);
}

TEST(CapturePreparers, OnlyTheNamedOpsPreparerRuns) {
  int calls = 0;
  static int* counter = nullptr;
  counter = &calls;
  ScopedPreparer on_matmul(OpId::matmul, [](const KernelContext&) { ++*counter; });
  KernelContext ctx{Device::cuda(kGpu)};
  kernels::prepare_capture("conv2d", ctx);
  kernels::prepare_capture("fused", ctx);  // not an op of the table: nothing to prepare
  EXPECT_EQ(calls, 0);
  kernels::prepare_capture(op_name(OpId::matmul), ctx);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace tide
