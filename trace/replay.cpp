#include "trace/replay.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/random_scope.h"

namespace tide::trace {

namespace {

void add_unique(std::vector<Storage*>& v, Storage* s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

bool external(ValueKind k) {
  return k == ValueKind::input || k == ValueKind::capture || k == ValueKind::state;
}

}  // namespace

void prepare_replay(Graph& g) {
  g.external_reads.clear();
  g.external_writes.clear();
  auto add = [](std::vector<int>& v, int id) {
    if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
  };
  for (const Node& n : g.nodes) {
    for (int id : n.reads)
      if (external(g.values[size_t(id)].kind)) add(g.external_reads, id);
    for (int id : n.writes)
      if (external(g.values[size_t(id)].kind)) add(g.external_writes, id);
  }
}

std::string node_failure(const Graph& g, size_t i, const char* what) {
  const Node& n = g.nodes[i];
  return tide::detail::concat("node ", i, " of ", g.nodes.size(), " (", n.op, ", traced at ",
                              n.site.file_name(), ":", n.site.line(), "): ", what);
}

void submit_wide(Device device, const char* op, const std::vector<Storage*>& reads,
                 const std::vector<Storage*>& writes, std::function<void(const KernelContext&)> fn,
                 tide::SourceLocation site) {
  Engine& eng = Engine::get();
  using Span = std::span<Storage* const>;
  if (reads.size() + writes.size() <= size_t(Engine::kMaxStorages)) {
    eng.submit(device, op, Span(reads), Span(writes), std::move(fn), site);
    return;
  }
  // A token storage (no memory) links the pieces: tasks before the main one wait for the
  // hazards of every storage and write the token; the main task reads and writes only the
  // token; tasks after it read the token and re-declare every storage, so later work waits
  // for them (FIFO on the stream puts them after the main task) and inherits a failure.
  StorageRef token = StorageRef::adopt(Storage::make_slot(0, device));
  constexpr size_t kChunk = Engine::kMaxStorages - 1;
  auto noop = [](const KernelContext&) {};
  std::vector<Storage*> chunk;
  Storage* t = token.get();
  auto piece = [&](const std::vector<Storage*>& list, size_t i) {
    chunk.assign(list.begin() + long(i), list.begin() + long(std::min(list.size(), i + kChunk)));
  };
  for (size_t i = 0; i < reads.size(); i += kChunk) {
    piece(reads, i);
    eng.submit(device, "trace_acquire", Span(chunk), Span(&t, 1), noop, site);
  }
  for (size_t i = 0; i < writes.size(); i += kChunk) {
    piece(writes, i);
    chunk.push_back(t);
    eng.submit(device, "trace_acquire", Span(), Span(chunk), noop, site);
  }
  eng.submit(device, op, Span(&t, 1), Span(&t, 1), std::move(fn), site);
  for (size_t i = 0; i < reads.size(); i += kChunk) {
    piece(reads, i);
    chunk.push_back(t);
    eng.submit(device, "trace_release", Span(chunk), Span(), noop, site);
  }
  for (size_t i = 0; i < writes.size(); i += kChunk) {
    piece(writes, i);
    eng.submit(device, "trace_release", Span(&t, 1), Span(chunk), noop, site);
  }
}

CallBindings prepare_call(Graph& g, std::span<const Tensor> args) {
  TIDE_CHECK(args.size() == g.inputs.size(), "trace", "replay needs ", g.inputs.size(),
             " tensor arguments, got ", args.size());
  CallBindings c;
  auto declared = [&](int id) {
    for (const std::vector<int>* ids : {&g.external_reads, &g.external_writes})
      if (std::find(ids->begin(), ids->end(), id) != ids->end()) return true;
    return false;
  };
  for (size_t k = 0; k < args.size(); ++k) {
    const Tensor& a = args[k];
    c.inputs.push_back({g.values[size_t(g.inputs[k])].storage.get(),
                        declared(g.inputs[k]) ? a.storage() : nullptr,
                        size_t(a.offset()) * size_of(a.dtype())});
  }
  auto arg_of = [&](int id) -> const Tensor* {
    for (size_t k = 0; k < g.inputs.size(); ++k)
      if (g.inputs[k] == id) return &args[k];
    return nullptr;
  };
  // Parallel branches see values as distinct memory: arguments that alias each other or a
  // captured tensor make this call run in program order.
  if (g.streams > 1)
    for (size_t k = 0; k < args.size() && !c.in_order; ++k) {
      const Storage* s = args[k].storage();
      for (size_t j = 0; j < k; ++j) c.in_order |= args[j].storage() == s;
      for (const std::vector<int>* ids : {&g.external_reads, &g.external_writes})
        for (int id : *ids)
          c.in_order |= g.values[size_t(id)].kind != ValueKind::input &&
                        g.values[size_t(id)].storage.get() == s;
    }
  for (int id : g.external_reads) {
    const Tensor* a = arg_of(id);
    add_unique(c.reads, a ? a->storage() : g.values[size_t(id)].storage.get());
  }
  for (int id : g.external_writes) {
    const Tensor* a = arg_of(id);
    add_unique(c.writes, a ? a->storage() : g.values[size_t(id)].storage.get());
  }
  std::vector<std::pair<int, StorageRef>> fresh;  // one fresh storage per output value
  for (const Graph::Output& o : g.outputs) {
    const Value& v = g.values[size_t(o.value)];
    StorageRef s;
    int64_t offset = o.offset;
    if (v.kind == ValueKind::output || v.kind == ValueKind::constant) {
      auto it =
          std::find_if(fresh.begin(), fresh.end(), [&](auto& p) { return p.first == o.value; });
      if (it == fresh.end()) {
        // A fresh output per call, taken when the replay runs if outputs are allocated
        // at execution (it counts in `allocated` either way: the replay will hold it).
        StorageRef f = Allocator::get(v.storage->device()).allocate_output(v.bytes, "trace");
        c.allocated += f->bytes();
        (v.kind == ValueKind::output ? c.outputs : c.copies).push_back({v.storage.get(), f.get()});
        add_unique(c.writes, f.get());
        fresh.emplace_back(o.value, f);
        s = f;
      } else {
        s = it->second;
      }
    } else if (const Tensor* a = arg_of(o.value)) {
      s = StorageRef::share(a->storage());
      offset += a->offset();
    } else {
      s = v.storage;  // a capture or state: the same tensor eager would return
    }
    c.result.push_back(Tensor::from_storage(std::move(s), o.shape, o.dtype, offset));
  }
  c.counters.resize(2 * g.random.size());
  for (size_t i = 0; i < g.random.size(); ++i) {
    // From the generator, or from the sub-stream of an eager trace::loop body that calls
    // this function (core/random_scope.h), as the eager ops would.
    PhiloxCounter r = reserve_random(*g.random[i].gen, g.random[i].numel);
    c.counters[2 * i] = r.offset;
    c.counters[2 * i + 1] = r.key;
  }
  return c;
}

void CallBindings::bind(Graph& g) const {
  for (const InputBind& b : inputs)
    if (b.arg) b.slot->rebind(static_cast<unsigned char*>(b.arg->data()) + b.byte_offset);
  for (const OutputBind& b : outputs) b.slot->rebind(b.fresh->data());
  for (size_t i = 0; i < g.random.size(); ++i) {
    g.random[i].slot[0] = counters[2 * i];
    g.random[i].slot[1] = counters[2 * i + 1];
  }
}

void CallBindings::finish() const {
  for (const OutputBind& b : copies)
    if (b.slot->bytes()) std::memcpy(b.fresh->data(), b.slot->data(), b.slot->bytes());
}

}  // namespace tide::trace
