// The recording fake's CUDA Graphs (FakeDevice, core/cuda/fake_device.h): enough of
// CUDA's semantics for CPU tests of the graph executor. A captured node keeps the
// operations its launch queued on the capturing stream; a copy node its pointers; an
// exec is a copy of the graph's nodes whose copies can be re-pointed; a launch queues one
// operation that runs the exec's nodes in the order they were added (each node's deps
// come before it). Not modelled: concurrency between independent nodes, conditional nodes.
#include <cstring>

#include "core/cuda/fake_device.h"
#include "core/error.h"

namespace tide::cuda {

namespace {
GraphNodeHandle handle_of(size_t index) { return reinterpret_cast<GraphNodeHandle>(index + 1); }
size_t index_of(GraphNodeHandle n) { return reinterpret_cast<uintptr_t>(n) - 1; }
}  // namespace

void FakeDevice::refuse_next_capture(std::string why) {
  std::lock_guard lock(mu_);
  refuse_capture_ = std::move(why);
}

FakeDevice::GraphShape FakeDevice::graph_shape(GraphHandle g) const {
  std::lock_guard lock(mu_);
  GraphShape shape;
  const auto& nodes = static_cast<Graph*>(g)->nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    shape.kinds += nodes[i].copy ? 'm' : 'k';
    shape.ops.push_back(nodes[i].ops.size());
    for (int d : nodes[i].deps) shape.edges.emplace_back(d, int(i));
  }
  return shape;
}

GraphHandle FakeDevice::graph_create() {
  std::lock_guard lock(mu_);
  graphs_.push_back(std::make_unique<Graph>());
  calls_.push_back({CallKind::graph_create, nullptr, nullptr, 0});
  return graphs_.back().get();
}

void FakeDevice::graph_destroy(GraphHandle g) {
  std::lock_guard lock(mu_);
  std::erase_if(graphs_, [&](const std::unique_ptr<Graph>& p) { return p.get() == g; });
}

void FakeDevice::graph_exec_destroy(GraphExecHandle exec) { graph_destroy(exec); }

namespace {
std::vector<int> dep_indices(std::span<const GraphNodeHandle> deps, size_t num_nodes) {
  std::vector<int> out;
  for (GraphNodeHandle d : deps) {
    size_t i = index_of(d);
    TIDE_ASSERT(i < num_nodes, "fake device: a graph dependency on a node of another graph");
    out.push_back(int(i));
  }
  return out;
}
}  // namespace

GraphNodeHandle FakeDevice::graph_add_captured(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                               const std::function<void(StreamHandle)>& launch,
                                               std::string* why) {
  GraphNode node;
  node.ops = capture(launch);
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_node, nullptr, nullptr, node.ops.size()});
  if (!refuse_capture_.empty()) {
    if (why) *why = "cudaErrorStreamCaptureUnsupported (fake): " + refuse_capture_;
    refuse_capture_.clear();
    return nullptr;
  }
  auto& nodes = static_cast<Graph*>(g)->nodes;
  node.deps = dep_indices(deps, nodes.size());
  nodes.push_back(std::move(node));
  return handle_of(nodes.size() - 1);
}

GraphNodeHandle FakeDevice::graph_add_memcpy(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                             void* dst, const void* src, size_t bytes, CopyKind) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_memcpy, nullptr, nullptr, bytes});
  auto& nodes = static_cast<Graph*>(g)->nodes;
  GraphNode node;
  node.deps = dep_indices(deps, nodes.size());
  node.copy = true;
  node.dst = dst;
  node.src = src;
  node.bytes = bytes;
  nodes.push_back(std::move(node));
  return handle_of(nodes.size() - 1);
}

GraphExecHandle FakeDevice::graph_instantiate(GraphHandle g, std::string*) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_instantiate, nullptr, nullptr, 0});
  graphs_.push_back(std::make_unique<Graph>(*static_cast<Graph*>(g)));
  return graphs_.back().get();
}

bool FakeDevice::graph_exec_update(GraphExecHandle exec, GraphHandle g) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_update, nullptr, nullptr, 0});
  auto& to = static_cast<Graph*>(exec)->nodes;
  const auto& from = static_cast<Graph*>(g)->nodes;
  // CUDA's rule, reduced to what the fake keeps: same nodes, kinds and edges.
  if (to.size() != from.size()) return false;
  for (size_t i = 0; i < to.size(); ++i)
    if (to[i].copy != from[i].copy || to[i].deps != from[i].deps) return false;
  to = from;
  return true;
}

void FakeDevice::graph_exec_set_memcpy(GraphExecHandle exec, GraphNodeHandle node, void* dst,
                                       const void* src, size_t bytes, CopyKind) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_set_memcpy, nullptr, nullptr, bytes});
  auto& nodes = static_cast<Graph*>(exec)->nodes;
  size_t i = index_of(node);
  TIDE_ASSERT(i < nodes.size() && nodes[i].copy, "fake device: not a copy node of this exec");
  nodes[i].dst = dst;
  nodes[i].src = src;
  nodes[i].bytes = bytes;
}

void FakeDevice::graph_launch(GraphExecHandle exec, StreamHandle s) {
  std::vector<GraphNode> nodes;
  {
    std::lock_guard lock(mu_);
    calls_.push_back({CallKind::graph_launch, s, nullptr, 0});
    nodes = static_cast<Graph*>(exec)->nodes;  // later updates apply to later launches
  }
  enqueue(s, [nodes = std::move(nodes)] {
    for (const GraphNode& n : nodes) {
      if (n.copy) {
        if (n.bytes) std::memcpy(n.dst, n.src, n.bytes);
        continue;
      }
      for (const auto& op : n.ops) op();
    }
  });
}

size_t FakeDevice::graph_node_count(GraphHandle g) {
  std::lock_guard lock(mu_);
  return static_cast<Graph*>(g)->nodes.size();
}

}  // namespace tide::cuda
