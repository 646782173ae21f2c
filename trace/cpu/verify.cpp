#include "trace/cpu/verify.h"

#include <cstring>

#include "core/engine/engine.h"
#include "core/error.h"
#include "trace/cpu/executor.h"
#include "trace/replay.h"

namespace tide::trace {

namespace {
using Bytes = std::vector<unsigned char>;

Bytes copy_of(Storage* s, size_t bytes) {
  Bytes b(bytes);
  if (bytes) std::memcpy(b.data(), s->data(), bytes);
  return b;
}

bool planned_elsewhere(ValueKind k) {
  return k == ValueKind::intermediate || k == ValueKind::output || k == ValueKind::dead;
}
}  // namespace

std::vector<Tensor> verify_program(const std::shared_ptr<Graph>& gp, std::span<const Tensor> args,
                                   Fusion fusion, tide::SourceLocation site) {
  Graph& g = *gp;
  TIDE_CHECK(!g.reference.empty() || g.nodes.empty(), "trace",
             "verify needs the recorded nodes (trace with Options::verify)");
  CallBindings c = prepare_call(g, args);
  wait_all();  // inputs and parameters are final; rethrows earlier failures
  std::lock_guard<std::mutex> lock(g.run_mu);
  c.bind(g);

  // Persistent values the program writes, to restore between the runs.
  std::vector<std::pair<Storage*, Bytes>> saved;
  for (int id : g.external_writes) {
    Storage* s = g.values[size_t(id)].storage.get();
    saved.emplace_back(s, copy_of(s, g.values[size_t(id)].bytes));
  }
  // Eager: the recorded kernels, every value in a buffer of its own.
  std::vector<void*> planned(g.values.size(), nullptr);
  std::vector<Bytes> own(g.values.size());
  struct Restore {  // the plan's bindings come back whatever happens
    Graph& g;
    std::vector<void*>& planned;
    ~Restore() {
      for (size_t i = 0; i < g.values.size(); ++i)
        if (planned_elsewhere(g.values[i].kind)) g.values[i].storage->rebind(planned[i]);
    }
  } restore{g, planned};
  for (size_t i = 0; i < g.values.size(); ++i) {
    Value& v = g.values[i];
    if (!planned_elsewhere(v.kind)) continue;
    planned[i] = v.storage->data();
    own[i].resize(v.bytes);
    v.storage->rebind(own[i].data());
  }
  for (size_t i = 0; i < g.reference.size(); ++i) {
    const Node& n = g.reference[i];
    try {
      n.kernel(cpu_kernel_context());
    } catch (const std::exception& e) {
      throw Error("trace", tide::detail::concat("verify: the eager run failed at op ", i, " (",
                                                n.op, ", traced at ", n.site.file_name(), ":",
                                                n.site.line(), "): ", e.what()));
    }
  }
  std::vector<Bytes> eager(g.values.size());
  std::vector<bool> has_eager(g.values.size(), false);
  for (const Node& n : g.reference)
    for (int id : n.writes) has_eager[size_t(id)] = true;
  for (size_t i = 0; i < g.values.size(); ++i)
    if (has_eager[i]) eager[i] = copy_of(g.values[i].storage.get(), g.values[i].bytes);

  // Traced: restore, rebind to the plan, run node by node and compare.
  for (auto& [s, b] : saved)
    if (!b.empty()) std::memcpy(s->data(), b.data(), b.size());
  for (size_t i = 0; i < g.values.size(); ++i)
    if (planned_elsewhere(g.values[i].kind)) g.values[i].storage->rebind(planned[i]);
  c.bind(g);
  std::vector<int> last_writer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int id : g.nodes[i].writes) last_writer[size_t(id)] = int(i);
  run_program(g, Order::program, [&](size_t i) {
    const Node& n = g.nodes[i];
    for (int id : n.writes) {
      if (last_writer[size_t(id)] != int(i) || !has_eager[size_t(id)]) continue;
      const Value& v = g.values[size_t(id)];
      const auto* got = static_cast<const unsigned char*>(v.storage->data());
      const Bytes& want = eager[size_t(id)];
      size_t at = 0;
      while (at < v.bytes && got[at] == want[at]) ++at;
      if (at == v.bytes) continue;
      throw Error("trace",
                  tide::detail::concat("verify: node ", i, " (", n.op,
                                       n.fused_ops > 1
                                           ? tide::detail::concat(", ", n.fused_ops, " fused ops")
                                           : std::string(),
                                       ", traced at ", n.site.file_name(), ":", n.site.line(),
                                       ") wrote a ", name(v.kind), " value (", v.bytes,
                                       " bytes) that differs from eager from byte ", at,
                                       fusion == Fusion::none ? "" : " (fusion on)"));
    }
  });
  c.finish();
  (void)site;
  return std::move(c.result);
}

}  // namespace tide::trace
