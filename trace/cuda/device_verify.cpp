// trace::function's verify mode on a GPU (verify_graph, trace/cuda/device_graph.h): the
// node-by-node launch of one call's bindings is the reference; the CUDA graph run of the same
// bindings must leave the same bytes in every output and persistent value.
#include <algorithm>
#include <cstring>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "trace/cuda/device_graph.h"

namespace tide::trace {

namespace {

using Bytes = std::vector<unsigned char>;

// A storage the call leaves behind, and the value it holds in the graph.
struct Kept {
  int value;
  Storage* storage;
};

// Queues a device-to-device copy of a whole storage (both on `device`).
void copy_storage(Device device, Storage* dst, Storage* src, tide::SourceLocation site) {
  Engine::get().submit(
      device, "verify_copy", {src}, {dst},
      [dst, src](const KernelContext& ctx) {
        ctx.api->memcpy_async(dst->data(), src->data(), src->bytes(),
                              cuda::CopyKind::device_to_device, ctx.stream);
      },
      site);
}

// Waits for everything queued (rethrowing a failure), then reads each storage to the host.
std::vector<Bytes> read_back(Device device, const std::vector<Kept>& kept) {
  wait_all();
  cuda::DeviceRuntime& rt = cuda::DeviceRuntime::get(device.index, "verify");
  std::vector<Bytes> out;
  for (const Kept& k : kept) {
    Bytes b(k.storage->bytes());
    if (!b.empty()) rt.copy_to_host(b.data(), k.storage->data(), b.size(), "verify");
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

std::vector<Tensor> verify_graph(const std::shared_ptr<Graph>& gp, std::span<const Tensor> args,
                                 tide::SourceLocation site) {
  Graph& g = *gp;
  CallBindings c = prepare_call(g, args);
  wait_all();  // inputs and parameters are final; rethrows earlier failures

  // What the call leaves: its fresh outputs, and the persistent values it writes (the
  // argument itself for an input written in place).
  std::vector<Kept> persistent, kept;
  for (int id : g.external_writes) {
    Storage* s = g.values[size_t(id)].storage.get();
    for (size_t k = 0; k < g.inputs.size(); ++k)
      if (g.inputs[k] == id) s = args[k].storage();
    persistent.push_back({id, s});
  }
  kept = persistent;
  for (const CallBindings::OutputBind& o : c.outputs)
    for (size_t id = 0; id < g.values.size(); ++id)
      if (g.values[id].storage.get() == o.slot) kept.push_back({int(id), o.fresh});

  // Persistent values as they were, to restore before the graph runs.
  std::vector<StorageRef> saved;
  for (const Kept& p : persistent) {
    saved.push_back(Allocator::get(g.device).allocate(p.storage->bytes(), "verify"));
    copy_storage(g.device, saved.back().get(), p.storage, site);
  }
  std::vector<Tensor> result = c.result;
  submit_replay(gp, c, Launch::nodes, site);
  std::vector<Bytes> reference = read_back(g.device, kept);
  for (size_t i = 0; i < persistent.size(); ++i)
    copy_storage(g.device, persistent[i].storage, saved[i].get(), site);
  submit_replay(gp, std::move(c), Launch::graph, site);
  std::vector<Bytes> graph = read_back(g.device, kept);

  std::vector<int> last_writer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int id : g.nodes[i].writes) last_writer[size_t(id)] = int(i);
  int first = -1;
  size_t at = 0, which = 0;
  for (size_t k = 0; k < kept.size(); ++k) {
    auto [ref, got] = std::mismatch(reference[k].begin(), reference[k].end(), graph[k].begin());
    int node = last_writer[size_t(kept[k].value)];
    if (ref == reference[k].end() || node < 0 || (first >= 0 && node >= first)) continue;
    first = node;
    at = size_t(ref - reference[k].begin());
    which = k;
  }
  if (first >= 0) {
    const Node& n = g.nodes[size_t(first)];
    const Value& v = g.values[size_t(kept[which].value)];
    throw Error("trace", tide::detail::concat("verify: node ", first, " (", n.op, ", traced at ",
                                              n.site.file_name(), ":", n.site.line(), ") wrote a ",
                                              name(v.kind), " value (", reference[which].size(),
                                              " bytes) that differs between the CUDA "
                                              "graph and the node-by-node launch on ",
                                              g.device.str(), " from byte ", at));
  }
  return result;
}

}  // namespace tide::trace
