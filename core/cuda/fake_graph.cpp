// The recording fake's CUDA Graphs (FakeDevice, core/cuda/fake_device.h): enough of
// CUDA's semantics for CPU tests of the graph executor. A captured node keeps the
// operations its launch queued on the capturing stream; a copy node its pointers; an
// exec is a copy of the graph's nodes whose copies can be re-pointed; a launch queues one
// operation that runs the exec's nodes in an order their edges allow, chosen by
// set_node_order: the latest-added ready node first (the default), the earliest, a random
// one, or every ready node at once on threads of their own (so a missing edge shows: a
// node that should wait for an earlier one runs before it, or beside it); a WHILE node
// runs its body while its condition is non-zero, and the loop kernels (start, step) set
// the conditions as CUDA's do (LoopConditions). Not modelled: what a programmatic edge
// changes (core/cuda/dependent_launch.h): the fake notes which nodes have them and runs
// them as ordinary ones.
#include <algorithm>
#include <cstring>
#include <queue>
#include <random>
#include <thread>
#include <unordered_map>

#include "core/cuda/fake_device.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/loop_count.h"

namespace tide::cuda {

namespace {
GraphNodeHandle handle_of(size_t index) { return reinterpret_cast<GraphNodeHandle>(index + 1); }
size_t index_of(GraphNodeHandle n) { return reinterpret_cast<uintptr_t>(n) - 1; }
}  // namespace

void FakeDevice::refuse_next_capture(std::string why) {
  std::lock_guard lock(mu_);
  refuse_capture_ = std::move(why);
}

void FakeDevice::refuse_programmatic_graphs(bool on) {
  std::lock_guard lock(mu_);
  refuse_programmatic_ = on;
}

namespace {
template <typename Graph>
FakeDevice::GraphShape shape_of(const Graph& g) {
  FakeDevice::GraphShape shape;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    shape.kinds += n.kind;
    shape.ops.push_back(n.kind == 's' || n.kind == 'e' ? n.copies.size() : n.ops.size());
    for (int d : n.deps) shape.edges.emplace_back(d, int(i));
    if (n.body) shape.bodies.push_back(shape_of(*n.body));
  }
  return shape;
}
}  // namespace

FakeDevice::GraphShape FakeDevice::graph_shape(GraphHandle g) const {
  std::lock_guard lock(mu_);
  return shape_of(*static_cast<Graph*>(g));
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
  for (const std::unique_ptr<Graph>& p : graphs_)
    if (p->source == g) p->source = nullptr;
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
  if (tl_invalidated_by) {  // the launch made a call CUDA refuses in a capture, and went on
    if (why)
      *why = std::string("cudaErrorStreamCaptureInvalidated (fake): ") + tl_invalidated_by +
             " while the thread captured";
    tl_invalidated_by = nullptr;
    return nullptr;
  }
  if (!refuse_capture_.empty()) {
    if (why) *why = "cudaErrorStreamCaptureUnsupported (fake): " + refuse_capture_;
    refuse_capture_.clear();
    return nullptr;
  }
  join_programmatic(g, deps, node);
  return add_node(g, deps, std::move(node));
}

void FakeDevice::join_programmatic(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                   GraphNode& node) {
  if (!programmatic_edges_wanted()) return;
  const auto& nodes = static_cast<Graph*>(g)->nodes;
  size_t kernels = 0;
  for (GraphNodeHandle d : deps) {
    const size_t i = index_of(d);
    if (i < nodes.size() && (nodes[i].kind == 'k' || nodes[i].kind == 's' || nodes[i].kind == 'e'))
      ++kernels;
  }
  if (!kernels) return;
  node.programmatic = true;
  note_programmatic_edges(kernels);
}

GraphNodeHandle FakeDevice::add_node(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                     GraphNode node) {
  auto& nodes = static_cast<Graph*>(g)->nodes;
  node.deps = dep_indices(deps, nodes.size());
  nodes.push_back(std::move(node));
  return handle_of(nodes.size() - 1);
}

void FakeDevice::graph_add_dependencies(GraphHandle g, std::span<const GraphNodeHandle> from,
                                        GraphNodeHandle to) {
  std::lock_guard lock(mu_);
  auto& nodes = static_cast<Graph*>(g)->nodes;
  const size_t t = index_of(to);
  TIDE_ASSERT(t < nodes.size(), "fake device: a dependency added to a node of another graph");
  // The fake wants a node's deps added before it (then no edge can close a cycle); tide
  // adds nodes in dependency order.
  for (int d : dep_indices(from, t)) {
    TIDE_ASSERT(std::find(nodes[t].deps.begin(), nodes[t].deps.end(), d) == nodes[t].deps.end(),
                "fake device: an edge added twice (CUDA refuses it)");
    nodes[t].deps.push_back(d);
  }
}

GraphNodeHandle FakeDevice::graph_add_memcpy(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                             void* dst, const void* src, size_t bytes, CopyKind) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_memcpy, nullptr, nullptr, bytes});
  TIDE_ASSERT(bytes > 0, "fake device: a zero-length copy node (CUDA refuses them)");
  GraphNode node;
  node.kind = 'm';
  node.copy = true;
  node.dst = dst;
  node.src = src;
  node.bytes = bytes;
  return add_node(g, deps, std::move(node));
}

bool FakeDevice::graph_create_condition(GraphHandle, ConditionalHandle* cond, std::string*) {
  std::lock_guard lock(mu_);
  *cond = next_cond_++;
  return true;
}

GraphNodeHandle FakeDevice::graph_add_while(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                            ConditionalHandle cond, GraphHandle* body,
                                            std::string*) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_node, nullptr, nullptr, 0});
  GraphNode node;
  node.kind = 'w';
  node.body = std::make_shared<Graph>();
  node.cond = cond;
  *body = node.body.get();
  return add_node(g, deps, std::move(node));
}

namespace {
// A loop kernel's copies run at once on a GPU: none may write what another reads or writes
// (a copy onto itself is skipped).
void check_copies(std::span<const LoopCopy> copies) {
  TIDE_ASSERT(copies.size() <= kMaxLoopCopies, "fake device: too many copies for a loop kernel");
  auto overlap = [](const void* a, size_t na, const void* b, size_t nb) {
    auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return x < y + nb && y < x + na;
  };
  for (size_t i = 0; i < copies.size(); ++i)
    for (size_t j = 0; j < copies.size(); ++j) {
      const LoopCopy &w = copies[i], &r = copies[j];
      if (w.dst == w.src || r.dst == r.src) continue;
      TIDE_ASSERT(!overlap(w.dst, w.bytes, r.src, r.bytes) &&
                      (i == j || !overlap(w.dst, w.bytes, r.dst, r.bytes)),
                  "fake device: a loop kernel's copies overlap");
    }
}
}  // namespace

GraphNodeHandle FakeDevice::add_loop_kernel(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                            GraphNode node, std::span<const LoopCopy> copies,
                                            const LoopRandom* random) {
  check_copies(copies);
  TIDE_ASSERT(!random || random->num_ops <= kMaxLoopRandom, "fake device: too many random ops");
  node.copies.assign(copies.begin(), copies.end());
  if (random) node.random = *random;
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_node, nullptr, nullptr, 0});
  join_programmatic(g, deps, node);
  return add_node(g, deps, std::move(node));
}

GraphNodeHandle FakeDevice::graph_add_loop_start(GraphHandle g,
                                                 std::span<const GraphNodeHandle> deps,
                                                 const LoopConditions& conds, int64_t* counter,
                                                 const LoopCount& count,
                                                 std::span<const LoopCopy> copies,
                                                 const LoopRandom* random) {
  TIDE_ASSERT(conds.unroll >= 1, "fake device: a loop unrolled fewer than once");
  GraphNode node;
  node.kind = 's';
  node.conds = conds;
  node.counter = counter;
  node.count = count;
  return add_loop_kernel(g, deps, std::move(node), copies, random);
}

GraphNodeHandle FakeDevice::graph_add_loop_step(GraphHandle body,
                                                std::span<const GraphNodeHandle> deps,
                                                ConditionalHandle cond, int64_t threshold,
                                                int64_t* counter, int64_t iterations,
                                                std::span<const LoopCopy> copies,
                                                const LoopRandom* random) {
  TIDE_ASSERT(iterations >= 1 && (iterations == 1 || !random),
              "fake device: a loop step completes at least one iteration, and one with "
              "random ops");
  GraphNode node;
  node.kind = 'e';
  node.cond = cond;
  node.threshold = threshold;
  node.counter = counter;
  node.iterations = iterations;
  return add_loop_kernel(body, deps, std::move(node), copies, random);
}

namespace {
template <typename Graph>
bool has_programmatic_edges(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [](const auto& n) {
    return n.programmatic || (n.body && has_programmatic_edges(*n.body));
  });
}
}  // namespace

// An exec is a snapshot, WHILE bodies included: a later change to the graph it came from
// (or to a body's handle) does not reach it.
void FakeDevice::own_bodies(Graph& exec) {
  for (GraphNode& n : exec.nodes)
    if (n.body) {
      n.body = std::make_shared<Graph>(*n.body);
      own_bodies(*n.body);
    }
}

GraphExecHandle FakeDevice::graph_instantiate(GraphHandle g, std::string* why) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_instantiate, nullptr, nullptr, 0});
  if (refuse_programmatic_ && has_programmatic_edges(*static_cast<Graph*>(g))) {
    if (why) *why = "cudaErrorInvalidValue (fake): a graph with programmatic edges";
    return nullptr;
  }
  graphs_.push_back(std::make_unique<Graph>(*static_cast<Graph*>(g)));
  own_bodies(*graphs_.back());
  graphs_.back()->source = static_cast<Graph*>(g);
  return graphs_.back().get();
}

namespace {
// CUDA's rule for an update, reduced to what the fake keeps: the same nodes, kinds, edges
// and edge types, and the same in every WHILE node's body; a WHILE node's parameters (its
// condition handle) cannot change.
template <typename Graph>
bool same_topology(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const auto &x = a.nodes[i], &y = b.nodes[i];
    if (x.kind != y.kind || x.deps != y.deps || x.programmatic != y.programmatic ||
        !x.body != !y.body || (x.kind == 'w' && x.cond != y.cond) ||
        (x.body && !same_topology(*x.body, *y.body)))
      return false;
  }
  return true;
}
}  // namespace

bool FakeDevice::graph_exec_update(GraphExecHandle exec, GraphHandle g) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_update, nullptr, nullptr, 0});
  Graph& to = *static_cast<Graph*>(exec);
  const Graph& from = *static_cast<Graph*>(g);
  if (!same_topology(to, from) || (refuse_programmatic_ && has_programmatic_edges(from)))
    return false;
  to.nodes = from.nodes;
  own_bodies(to);
  return true;
}

void FakeDevice::graph_exec_set_memcpy(GraphExecHandle exec, GraphNodeHandle node, void* dst,
                                       const void* src, size_t bytes, CopyKind) {
  std::lock_guard lock(mu_);
  calls_.push_back({CallKind::graph_set_memcpy, nullptr, nullptr, bytes});
  auto& nodes = static_cast<Graph*>(exec)->nodes;
  size_t i = index_of(node);
  TIDE_ASSERT(static_cast<Graph*>(exec)->source,
              "fake device: a copy node re-pointed after its graph was destroyed (CUDA: "
              "cudaErrorInvalidValue)");
  TIDE_ASSERT(i < nodes.size() && nodes[i].copy, "fake device: not a copy node of this exec");
  TIDE_ASSERT(bytes > 0, "fake device: a copy node re-pointed to zero bytes (CUDA refuses it)");
  nodes[i].dst = dst;
  nodes[i].src = src;
  nodes[i].bytes = bytes;
}

namespace {

// How one launch runs independent nodes (FakeDevice::NodeOrder), with its random state.
struct Order {
  FakeDevice::NodeOrder how;
  std::mt19937_64 rng;
};

// The waves of a launch: each wave's nodes are ready once the earlier waves ran. One node a
// wave, in the chosen order, except `concurrent`, which takes every ready node at once.
template <typename Node>
std::vector<std::vector<size_t>> run_waves(const std::vector<Node>& nodes, Order& order) {
  std::vector<std::vector<size_t>> next(nodes.size());
  std::vector<size_t> waiting(nodes.size()), ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    waiting[i] = nodes[i].deps.size();
    for (int d : nodes[i].deps) next[size_t(d)].push_back(i);
    if (!waiting[i]) ready.push_back(i);
  }
  std::vector<std::vector<size_t>> waves;
  while (!ready.empty()) {
    std::vector<size_t> wave;
    switch (order.how) {
      case FakeDevice::NodeOrder::concurrent: wave.swap(ready); break;
      case FakeDevice::NodeOrder::latest_first:
      case FakeDevice::NodeOrder::earliest_first:
      case FakeDevice::NodeOrder::shuffled: {
        auto pick = std::max_element(ready.begin(), ready.end());
        if (order.how == FakeDevice::NodeOrder::earliest_first)
          pick = std::min_element(ready.begin(), ready.end());
        if (order.how == FakeDevice::NodeOrder::shuffled)
          pick = ready.begin() + std::ptrdiff_t(order.rng() % ready.size());
        wave.push_back(*pick);
        ready.erase(pick);
      }
    }
    for (size_t i : wave)
      for (size_t j : next[i])
        if (!--waiting[j]) ready.push_back(j);
    waves.push_back(std::move(wave));
  }
  return waves;  // deps always name earlier nodes, so every node is in one
}

template <typename Node>
void run_nodes(const std::vector<Node>& nodes, std::unordered_map<ConditionalHandle, int>& cond,
               Order& order);

// Runs one node; a WHILE node runs its body's nodes in the same order policy.
template <typename Node>
void run_node(const Node& n, std::unordered_map<ConditionalHandle, int>& cond, Order& order) {
  switch (n.kind) {
    case 'm':
      if (n.bytes) std::memcpy(n.dst, n.src, n.bytes);
      break;
    case 's':
    case 'e':
      for (const LoopCopy& c : n.copies)
        if (c.bytes && c.dst != c.src) std::memmove(c.dst, c.src, c.bytes);
      advance_loop_random(n.random, n.kind == 's');
      if (n.kind == 'e') {
        cond[n.cond] = loop_unrolled_body_runs(*n.counter -= n.iterations, n.threshold);
      } else {
        const int64_t count = *n.counter = loop_count(n.count.tensor, n.count.dtype, n.count.fixed);
        cond[n.conds.main] = loop_unrolled_body_runs(count, n.conds.unroll);
        if (n.conds.unroll > 1) cond[n.conds.rest] = loop_remainder_runs(count, n.conds.unroll);
      }
      break;
    case 'w':
      while (cond[n.cond]) run_nodes(n.body->nodes, cond, order);
      break;
    default:
      for (const auto& op : n.ops) op();
  }
}

// Runs nodes wave by wave; conditions start at 0 for each launch. A concurrent wave runs
// its nodes on threads of their own; the conditions they set are merged after it (only
// loop kernels set them, and a loop's kernels are ordered by edges).
template <typename Node>
void run_nodes(const std::vector<Node>& nodes, std::unordered_map<ConditionalHandle, int>& cond,
               Order& order) {
  for (const std::vector<size_t>& wave : run_waves(nodes, order)) {
    if (wave.size() == 1 || order.how != FakeDevice::NodeOrder::concurrent) {
      for (size_t i : wave) run_node(nodes[i], cond, order);
      continue;
    }
    std::vector<std::unordered_map<ConditionalHandle, int>> conds(wave.size(), cond);
    std::vector<Order> orders(wave.size(), order);
    std::vector<std::thread> threads;
    for (size_t k = 0; k < wave.size(); ++k)
      threads.emplace_back([&, k] { run_node(nodes[wave[k]], conds[k], orders[k]); });
    for (std::thread& t : threads) t.join();
    for (const auto& c : conds)
      for (const auto& [handle, v] : c)
        if (cond[handle] != v) cond[handle] = v;
  }
}

}  // namespace

void FakeDevice::graph_launch(GraphExecHandle exec, StreamHandle s) {
  std::vector<GraphNode> nodes;
  Order order{NodeOrder::latest_first, {}};
  {
    std::lock_guard lock(mu_);
    calls_.push_back({CallKind::graph_launch, s, nullptr, 0});
    nodes = static_cast<Graph*>(exec)->nodes;  // later updates apply to later launches
    order = {node_order_, std::mt19937_64(order_seed_)};
    if (node_order_ == NodeOrder::shuffled) order_seed_ = order.rng();  // another one next time
  }
  enqueue(s, [nodes = std::move(nodes), order]() mutable {
    std::unordered_map<ConditionalHandle, int> cond;
    run_nodes(nodes, cond, order);
  });
}

void FakeDevice::set_node_order(NodeOrder order, uint64_t seed) {
  std::lock_guard lock(mu_);
  node_order_ = order;
  order_seed_ = seed;
}

size_t FakeDevice::graph_node_count(GraphHandle g) {
  std::lock_guard lock(mu_);
  return static_cast<Graph*>(g)->nodes.size();
}

}  // namespace tide::cuda
