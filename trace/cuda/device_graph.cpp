#include "trace/cuda/device_graph.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/allocator.h"
#include "core/cuda/cuda_stream.h"
#include "core/cuda/runtime.h"
#include "core/engine/capture.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/memory_record.h"
#include "ops/kernel_entry.h"
#include "trace/replay.h"

namespace tide::trace {

using cuda::CopyKind;
using cuda::DeviceApi;
using cuda::GraphHandle;
using cuda::GraphNodeHandle;

DeviceGraph::~DeviceGraph() {
  SpareExec s{api, exec, graph, std::move(copy_in), std::move(copy_back), std::move(copy_out)};
  if (recycler && exec && updatable) recycler->give(std::move(s));
  else ExecRecycler::destroy(s);
}

DeviceGraphStats DeviceGraph::stats() const {
  std::lock_guard lock(mu);
  return stats_;
}

size_t DeviceGraph::held_bytes() const {
  size_t n = workspace ? workspace->bytes() : 0;
  for (const StorageRef& b : fixed) n += b->bytes();
  return n;
}

void prepare_device_graph(Graph& g) {
  auto dg = std::make_shared<DeviceGraph>();
  tide::detail::CapturePause pause;  // real allocations, also when called while recording
  memory::RoleScope role(memory::Role::trace_arena);
  Allocator& al = Allocator::get(g.device);
  auto fix = [&](int id) {
    Value& v = g.values[size_t(id)];
    StorageRef b = al.allocate(std::max<size_t>(v.bytes, 1), "trace");
    v.storage->rebind(b->data());
    dg->fixed.push_back(std::move(b));
  };
  if (!cuda::runs_host_kernels(g.device.index))  // a fake's kernels run on the host: none
    dg->workspace = al.allocate(cuda::CudaStream::kWorkspaceBytes, "trace");
  for (int id : g.inputs) fix(id);
  for (size_t id = 0; id < g.values.size(); ++id)
    if (g.values[id].kind == ValueKind::output) {
      fix(int(id));
      dg->out_values.push_back(int(id));
    }
  g.device_graph = std::move(dg);
}

namespace {

// One copy a replay makes: an argument into its input's fixed buffer, or an output's fixed
// buffer into this call's fresh tensor.
struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
};

// An argument no node reads or writes gets no copy (bytes 0: no copy node either).
Copy input_copy(const Graph& g, const CallBindings& c, size_t k) {
  const Value& v = g.values[size_t(g.inputs[k])];
  const CallBindings::InputBind& b = c.inputs[k];
  if (!b.arg) return {nullptr, nullptr, 0};
  return {v.storage->data(), static_cast<unsigned char*>(b.arg->data()) + b.byte_offset, v.bytes};
}

// Whether g writes value id, an input or a capture, in place.
bool writes_external(const Graph& g, int id) {
  return std::find(g.external_writes.begin(), g.external_writes.end(), id) !=
         g.external_writes.end();
}

// An input the graph writes in place, from its fixed buffer back into the argument (the
// caller's tensor, as eager writes it); bytes 0 for an input it does not write.
Copy back_copy(const Graph& g, const CallBindings& c, size_t k) {
  if (!writes_external(g, g.inputs[k])) return {nullptr, nullptr, 0};
  const Copy in = input_copy(g, c, k);
  return {const_cast<void*>(in.src), in.dst, in.bytes};
}

Copy output_copy(const Graph& g, const CallBindings& c, int id) {
  const Value& v = g.values[size_t(id)];
  for (const CallBindings::OutputBind& o : c.outputs)
    if (o.slot == v.storage.get()) return {o.fresh->data(), v.storage->data(), v.bytes};
  TIDE_ASSERT(false, "trace: an output value without a fresh storage");
  return {};
}

class GraphBuild {
 public:
  explicit GraphBuild(DeviceApi& api) : api_(api), h_(api.graph_create()) {}
  ~GraphBuild() {
    if (h_) api_.graph_destroy(h_);
  }
  GraphBuild(const GraphBuild&) = delete;
  GraphBuild& operator=(const GraphBuild&) = delete;
  GraphHandle handle() const { return h_; }
  // The graph outlives the build (its exec's copy nodes are re-pointed through it).
  GraphHandle release() { return std::exchange(h_, nullptr); }

 private:
  DeviceApi& api_;
  GraphHandle h_;
};

// While a node's kernels are captured: allocators refuse (tide::detail::tl_graph_capture).
class CapturingKernels {
 public:
  CapturingKernels() { tide::detail::tl_graph_capture = true; }
  ~CapturingKernels() { tide::detail::tl_graph_capture = false; }
  CapturingKernels(const CapturingKernels&) = delete;
  CapturingKernels& operator=(const CapturingKernels&) = delete;
};

}  // namespace

KernelContext capture_context(const KernelContext& ctx, DeviceGraph& dg) {
  KernelContext cctx = ctx;
  cctx.host_functions = &dg.host_functions;
  if (dg.workspace) {
    cctx.workspace = dg.workspace->data();
    cctx.workspace_bytes = dg.workspace->bytes();
    cctx.workspace_used = nullptr;  // a workspace of its own: not ordered with the caller's
  }
  return cctx;
}

GraphNodeHandle add_copy_node(DeviceApi& api, GraphHandle h, std::span<const GraphNodeHandle> deps,
                              void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return nullptr;
  return api.graph_add_memcpy(h, deps, dst, src, bytes, CopyKind::device_to_device);
}

std::string add_planned_nodes(const Graph& g, GraphHandle h,
                              std::span<const GraphNodeHandle> roots_after,
                              const KernelContext& ctx, std::vector<GraphNodeHandle>* sinks) {
  DeviceApi& api = *ctx.api;
  const size_t n = g.nodes.size();
  std::vector<std::vector<GraphNodeHandle>> preds(n), exits(n);
  // The graph runs independent nodes at once, but they share one workspace (cuBLASLt's,
  // CUB's and cuDNN's scratch): a node that used it waits for the previous such node, in
  // program order (a valid order: the graph stays acyclic). ws_last: that node's exits.
  std::vector<GraphNodeHandle> ws_last;
  bool ws_used = false;
  KernelContext cctx = ctx;
  cctx.workspace_used = &ws_used;
  for (size_t i = 0; i < n; ++i) {
    // Roots wait for roots_after; every other node reaches a root, so it does too.
    std::span<const GraphNodeHandle> deps =
        preds[i].empty() ? roots_after : std::span<const GraphNodeHandle>(preds[i]);
    // The last workspace user's nodes that deps do not already hold.
    std::vector<GraphNodeHandle> ws_after;
    for (GraphNodeHandle w : ws_last)
      if (std::find(deps.begin(), deps.end(), w) == deps.end()) ws_after.push_back(w);
    ws_used = false;
    std::string why;
    try {
      if (g.nodes[i].piece) {
        // A loop cannot say in advance whether it uses the workspace: it waits for the
        // last user in any case.
        std::vector<GraphNodeHandle> piece_deps(deps.begin(), deps.end());
        piece_deps.insert(piece_deps.end(), ws_after.begin(), ws_after.end());
        KernelContext pctx = ctx;
        pctx.workspace_used = &ws_used;
        why = g.nodes[i].piece->add_to(h, piece_deps, pctx, &exits[i]);
        if (!why.empty()) return node_failure(g, i, why.c_str());
      } else {
        kernels::prepare_capture(g.nodes[i].op, cctx);  // outside the capture, on this thread
        GraphNodeHandle node = api.graph_add_captured(
            h, deps,
            [&](cuda::StreamHandle s) {
              CapturingKernels on;
              cctx.stream = s;
              g.nodes[i].kernel(cctx);
            },
            &why);
        if (!node) return "CUDA refused to capture " + node_failure(g, i, why.c_str());
        exits[i].push_back(node);
        if (ws_used) api.graph_add_dependencies(h, ws_after, node);
      }
    } catch (const std::exception& e) {
      return "capturing " + node_failure(g, i, e.what());
    }
    if (ws_used) {
      ws_last = exits[i];
      if (ctx.workspace_used) *ctx.workspace_used = true;  // a loop body tells its loop
    }
    for (int s : g.deps.successors[i])
      preds[size_t(s)].insert(preds[size_t(s)].end(), exits[i].begin(), exits[i].end());
  }
  sinks->clear();
  for (size_t i = 0; i < n; ++i)
    if (g.deps.successors[i].empty()) sinks->insert(sinks->end(), exits[i].begin(), exits[i].end());
  if (n == 0) sinks->assign(roots_after.begin(), roots_after.end());
  return {};
}

void launch_planned_nodes(const Graph& g, const KernelContext& ctx) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    try {
      g.nodes[i].kernel(ctx);
    } catch (const std::exception& e) {
      throw std::runtime_error(node_failure(g, i, e.what()));
    }
  }
}

namespace {

// Gives dg an evicted signature's exec updated to h (built, not instantiated), with that
// exec's own graph and copy nodes in place of h's. False (dg unchanged) when there is no
// spare, or its copies differ from h's, or CUDA refuses the update: the spare is destroyed.
bool update_spare(DeviceGraph& dg, GraphHandle h) {
  std::optional<SpareExec> spare = dg.recycler->take(dg.api);
  if (!spare) return false;
  auto same_places = [](const std::vector<GraphNodeHandle>& a,
                        const std::vector<GraphNodeHandle>& b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](auto x, auto y) { return !x == !y; });
  };
  if (!same_places(spare->copy_in, dg.copy_in) || !same_places(spare->copy_back, dg.copy_back) ||
      !same_places(spare->copy_out, dg.copy_out) || !dg.api->graph_exec_update(spare->exec, h)) {
    ExecRecycler::destroy(*spare);
    return false;
  }
  // h dies with the build: the exec's copy nodes are re-pointed through its own graph.
  dg.exec = spare->exec;
  dg.graph = spare->graph;
  dg.copy_in = std::move(spare->copy_in);
  dg.copy_back = std::move(spare->copy_back);
  dg.copy_out = std::move(spare->copy_out);
  ++dg.recycler->updated;
  return true;
}

// Builds dg's CUDA graph from g (see the header). Returns "" when dg.exec is ready, else
// why the nodes must be launched one by one (a refused capture or instantiation, a kernel
// that failed while captured: launched again outside a graph, it fails there with its
// own error, or runs), and *refused_instantiation whether that was the instantiation.
std::string build_once(Graph& g, DeviceGraph& dg, const KernelContext& ctx, const CallBindings& c,
                       bool* refused_instantiation) {
  *refused_instantiation = false;
  DeviceApi& api = *ctx.api;
  dg.api = &api;
  dg.copy_in.clear();
  dg.copy_back.clear();
  dg.copy_out.clear();
  dg.host_functions.fns.clear();
  GraphBuild b(api);
  const GraphHandle h = b.handle();
  // An empty value, or an argument no node uses, gets no copy node: nullptr stands in its
  // place, and the replay re-points only the others.
  auto add_copy = [&](std::span<const GraphNodeHandle> deps, const Copy& cp) {
    return add_copy_node(api, h, deps, cp.dst, cp.src, cp.bytes);
  };
  std::vector<GraphNodeHandle> roots_after;
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    dg.copy_in.push_back(add_copy({}, input_copy(g, c, k)));
    if (dg.copy_in.back()) roots_after.push_back(dg.copy_in.back());
  }
  std::vector<GraphNodeHandle> sinks;
  tide::detail::ReplayHooksRun hooks_run(true);  // this graph's replays run g.replay_hooks
  std::string failed = add_planned_nodes(g, h, roots_after, capture_context(ctx, dg), &sinks);
  if (!failed.empty()) return failed;
  for (size_t k = 0; k < g.inputs.size(); ++k)
    dg.copy_back.push_back(add_copy(sinks, back_copy(g, c, k)));
  for (int id : dg.out_values) dg.copy_out.push_back(add_copy(sinks, output_copy(g, c, id)));
  const size_t nodes = api.graph_node_count(h);  // before the exec is ours to release
  // A loop's WHILE nodes cannot be updated: CUDA does not change a conditional node's
  // parameters, and each build creates new condition handles.
  dg.updatable = !g.has_pieces();
  if (!dg.recycler || !dg.updatable || !update_spare(dg, h)) {
    std::string why;
    dg.exec = api.graph_instantiate(h, &why);
    if (!dg.exec) {
      *refused_instantiation = true;
      return "CUDA refused to instantiate the graph: " + why;
    }
    dg.graph = b.release();
    if (dg.recycler) ++dg.recycler->instantiated;
  }
  std::lock_guard lock(dg.mu);
  dg.stats_.graph_nodes = nodes;
  return {};
}

// build_once, and once more with ordinary edges when CUDA refused to instantiate a graph
// that had programmatic ones: it takes them node by node, but may refuse the whole graph
// (in a conditional node's body, say), which would otherwise cost the replay its graph.
// The function's later graphs (its other signatures) then start with ordinary edges.
std::string build(Graph& g, DeviceGraph& dg, const KernelContext& ctx, const CallBindings& c) {
  std::string because = dg.recycler ? dg.recycler->ordinary_edges_because() : std::string();
  std::optional<cuda::OrdinaryEdgesOnly> ordinary;
  if (!because.empty()) ordinary.emplace();
  const uint64_t edges = cuda::programmatic_edges_added_here();
  bool refused = false;
  std::string why = build_once(g, dg, ctx, c, &refused);
  if (!why.empty() && refused && cuda::programmatic_edges_added_here() != edges) {
    ordinary.emplace();
    std::string again = build_once(g, dg, ctx, c, &refused);
    if (!again.empty()) return why + "; with ordinary edges instead: " + again;
    because = why;
    if (dg.recycler) dg.recycler->need_ordinary_edges(because);
    why.clear();
  }
  std::lock_guard lock(dg.mu);
  dg.stats_.ordinary_edges_because = because;
  return why;
}

// The replay without a graph: the copies and the nodes, one by one on the stream.
void launch_nodes(const Graph& g, const DeviceGraph& dg, const KernelContext& ctx,
                  const CallBindings& c) {
  DeviceApi& api = *ctx.api;
  auto copy = [&](const Copy& cp) {
    if (cp.bytes)
      api.memcpy_async(cp.dst, cp.src, cp.bytes, CopyKind::device_to_device, ctx.stream);
  };
  for (size_t k = 0; k < g.inputs.size(); ++k) copy(input_copy(g, c, k));
  launch_planned_nodes(g, ctx);
  for (size_t k = 0; k < g.inputs.size(); ++k) copy(back_copy(g, c, k));
  for (int id : dg.out_values) copy(output_copy(g, c, id));
}

void launch(Graph& g, DeviceGraph& dg, const KernelContext& ctx, const CallBindings& c,
            Launch how) {
  bool first = how == Launch::graph && !dg.stats().built;
  if (first) {
    std::string fallback = build(g, dg, ctx, c);
    // A graph with collectives replays on every rank or on none: a rank launching node by
    // node runs its agreements in other places than a rank replaying the graph.
    if (!g.replay_hooks.empty() && !g.replay_hooks.front()->on_every_rank(fallback.empty()) &&
        fallback.empty()) {
      SpareExec built{
          dg.api, std::exchange(dg.exec, nullptr), std::exchange(dg.graph, nullptr), {}, {}, {}};
      ExecRecycler::destroy(built);
      fallback =
          "another rank could not build its graph (a trace with collectives replays "
          "its CUDA graph on every rank or on none)";
    }
    std::lock_guard lock(dg.mu);
    dg.stats_.built = true;
    dg.stats_.fallback = std::move(fallback);
  }
  DeviceApi& api = *ctx.api;
  // This call's random counters (reserved in eager order by prepare_call), where the
  // kernels read them (Recorder::random_counter): before the graph, in stream order.
  for (size_t i = 0; i < g.random.size(); ++i)
    api.write_words(ctx.stream, static_cast<uint64_t*>(g.random[i].device_slot->data()),
                    std::span<const uint64_t>(&c.counters[2 * i], 2));
  if (!dg.exec || how == Launch::nodes) {
    launch_nodes(g, dg, ctx, c);
  } else {
    if (!first) {  // a built graph already copies from and to this call's tensors
      auto repoint = [&](GraphNodeHandle node, const Copy& cp) {
        if (node)  // none for an empty value
          api.graph_exec_set_memcpy(dg.exec, node, cp.dst, cp.src, cp.bytes,
                                    CopyKind::device_to_device);
      };
      for (size_t k = 0; k < g.inputs.size(); ++k) {
        repoint(dg.copy_in[k], input_copy(g, c, k));
        repoint(dg.copy_back[k], back_copy(g, c, k));
      }
      for (size_t j = 0; j < dg.out_values.size(); ++j)
        repoint(dg.copy_out[j], output_copy(g, c, dg.out_values[j]));
    }
    for (const auto& hook : g.replay_hooks) hook->before_replay();  // the host steps
    api.graph_launch(dg.exec, ctx.stream);
  }
  // Outputs the graph never writes (constants): copied after it, in stream order.
  for (const CallBindings::OutputBind& b : c.copies)
    api.memcpy_async(b.fresh->data(), b.slot->data(), b.slot->bytes(), CopyKind::device_to_device,
                     ctx.stream);
}

}  // namespace

bool aliases_written_memory(const Graph& g, std::span<const Tensor> args) {
  if (g.external_writes.empty()) return false;
  auto written = [&](int id) { return writes_external(g, id); };
  // Each argument against the later ones and the captured values g reads or writes (those
  // are used in place, as in eager); whether either side is written only when they share.
  const size_t n = std::min(args.size(), g.inputs.size());
  for (size_t i = 0; i < n; ++i) {
    const Storage* s = args[i].storage();
    for (size_t j = i + 1; j < n; ++j)
      if (args[j].storage() == s && (written(g.inputs[i]) || written(g.inputs[j]))) return true;
    for (const std::vector<int>* ids : {&g.external_reads, &g.external_writes})
      for (int id : *ids) {
        const Value& v = g.values[size_t(id)];
        if (v.kind != ValueKind::input && v.storage.get() == s &&
            (written(g.inputs[i]) || written(id)))
          return true;
      }
  }
  return false;
}

void submit_replay(const std::shared_ptr<Graph>& gp, CallBindings c, Launch how,
                   tide::SourceLocation site) {
  Graph& g = *gp;
  TIDE_ASSERT(g.device_graph, "trace: a GPU graph replayed before prepare_device_graph");
  std::vector<Storage*> reads = std::move(c.reads), writes = std::move(c.writes);
  // The graph's own memory (arena, fixed buffers, workspace, random counters) is written by
  // every replay: replays on different streams are ordered by the engine's hazards, and a
  // block is reused only after the replays that used it completed on the GPU.
  if (g.arena) writes.push_back(g.arena.get());
  for (const StorageRef& b : g.device_graph->fixed) writes.push_back(b.get());
  if (g.device_graph->workspace) writes.push_back(g.device_graph->workspace.get());
  for (const RandomCounter& r : g.random) writes.push_back(r.device_slot.get());
  submit_wide(
      g.device, "trace_replay", reads, writes,
      [gp, c = std::move(c), how](const KernelContext& ctx) {
        std::lock_guard<std::mutex> lock(gp->run_mu);
        launch(*gp, *gp->device_graph, ctx, c, how);
      },
      site);
}

std::vector<Tensor> replay_graph(const std::shared_ptr<Graph>& gp, std::span<const Tensor> args,
                                 tide::SourceLocation site, size_t* allocated) {
  CallBindings c = prepare_call(*gp, args);
  if (allocated) *allocated += c.allocated;
  std::vector<Tensor> result = std::move(c.result);
  submit_replay(gp, std::move(c), Launch::graph, site);
  return result;
}

}  // namespace tide::trace
