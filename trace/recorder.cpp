#include "trace/recorder.h"

#include <algorithm>
#include <cstring>

#include "core/allocator.h"
#include "core/error.h"
#include "core/random_tape.h"

namespace tide::trace {

const char* name(ValueKind k) {
  switch (k) {
    case ValueKind::input: return "input";
    case ValueKind::capture: return "capture";
    case ValueKind::intermediate: return "intermediate";
    case ValueKind::output: return "output";
    case ValueKind::state: return "state";
    case ValueKind::constant: return "constant";
    case ValueKind::dead: return "dead";
  }
  return "?";
}

Recorder::Recorder(std::string what) : what_(std::move(what)), g_(std::make_shared<Graph>()) {}

Recorder::~Recorder() = default;

int Recorder::value_of(Storage* s) {
  auto [it, fresh] = ids_.try_emplace(s, int(g_->values.size()));
  if (fresh) {
    Value v;
    v.storage = StorageRef::share(s);  // a parameter lives as long as the graph using it
    v.bytes = s->bytes();
    v.kind = ValueKind::capture;
    g_->values.push_back(std::move(v));
    created_.push_back(false);
  }
  return it->second;
}

int Recorder::references_held(const Storage* s) const {
  return ids_.count(const_cast<Storage*>(s)) ? 1 : 0;
}

bool Recorder::host_data(const Storage* s) const {
  auto it = ids_.find(const_cast<Storage*>(s));
  if (it == ids_.end() || !created_[size_t(it->second)]) return false;
  return std::none_of(g_->nodes.begin(), g_->nodes.end(), [&](const Node& n) {
    return std::find(n.writes.begin(), n.writes.end(), it->second) != n.writes.end();
  });
}

void Recorder::grad_reset(const TensorImpl& leaf) { grads_reset_.push_back(&leaf); }

void Recorder::grad_bound(const std::shared_ptr<TensorImpl>& leaf,
                          const std::shared_ptr<TensorImpl>& grad, bool taken) {
  for (const Graph::GradBinding& b : g_->grad_bindings)
    if (b.leaf.lock() == leaf) return;  // its first effect decides what a call needs
  const bool reset =
      std::find(grads_reset_.begin(), grads_reset_.end(), leaf.get()) != grads_reset_.end();
  g_->grad_bindings.push_back({leaf, grad, taken, reset});
}

bool Recorder::created_here(Storage* s) const {
  auto it = ids_.find(s);
  return it != ids_.end() && created_[size_t(it->second)];
}

void Recorder::note_nested_references(const Graph& body, const Recorder& nested) {
  for (const Value& v : body.values)
    if (v.kind == ValueKind::capture) ++nested_refs_[v.storage.get()];
  for (const auto& [s, n] : nested.nested_refs_)
    if (!nested.created_here(const_cast<Storage*>(s))) nested_refs_[s] += n;
}

StorageRef Recorder::allocate(size_t bytes, Device device, const char* op) {
  StorageRef block;
  {
    tide::detail::CapturePause pause;  // the recorder's own memory is a real allocation
    // Deferred: no memory until host code touches the tensor's bytes while recording (a
    // fill from host data); the values only ops touch never take any, so recording a step
    // costs next to nothing.
    block = Allocator::get(device).allocate_deferred(bytes, op);
  }
  Storage* slot = Storage::make_slot(bytes, device);
  block->retain();  // the slot owns one reference until finish() decides
  slot->own_lazy_backing(block.get());
  StorageRef ref = StorageRef::adopt(slot);
  ids_.emplace(slot, int(g_->values.size()));
  Value v;
  v.storage = ref;
  v.bytes = bytes;
  v.kind = ValueKind::intermediate;  // refined by finish()
  g_->values.push_back(std::move(v));
  created_.push_back(true);
  return ref;
}

Tensor Recorder::placeholder(const Tensor& arg) {
  StorageRef s = StorageRef::adopt(Storage::make_slot(arg.nbytes(), arg.device()));
  if (!input_device_) input_device_ = arg.device();
  int id = int(g_->values.size());
  ids_.emplace(s.get(), id);
  Value v;
  v.storage = s;
  v.bytes = arg.nbytes();
  v.kind = ValueKind::input;
  g_->values.push_back(std::move(v));
  created_.push_back(false);
  g_->inputs.push_back(id);
  return Tensor::from_storage(s, arg.shape(), arg.dtype());
}

void Recorder::record(const char* op, std::span<Storage* const> reads,
                      std::span<Storage* const> writes, tide::detail::Kernel kernel,
                      tide::SourceLocation site) {
  for (std::span<Storage* const> list : {reads, writes})
    for (Storage* s : list) {
      if (!device_) device_ = s->device();
      TIDE_CHECK(s->device() == *device_, op, "uses memory on ", s->device().str(), " and on ",
                 device_->str(), " inside ", what_,
                 ": a trace runs on one device; pass tensors that are on it, and make "
                 "data from the host there (from_vector(values, shape, device))");
    }
  Node n;
  n.op = op;
  n.site = site;
  for (Storage* s : reads) n.reads.push_back(value_of(s));
  for (Storage* s : writes) n.writes.push_back(value_of(s));
  n.kernel = std::move(kernel);
  if (next_desc_ && writes.size() == 1 && next_desc_->out_storage == writes[0]) n.ew = *next_desc_;
  next_desc_.reset();
  g_->nodes.push_back(std::move(n));
  ++g_->recorded_ops;
}

void Recorder::set_last_piece(std::shared_ptr<GraphPiece> piece) {
  TIDE_ASSERT(!g_->nodes.empty(), "trace: a graph piece before any node");
  g_->nodes.back().piece = std::move(piece);
}

void Recorder::host_read(const char* op) {
  throw Error(op, "cannot read a tensor on the host inside " + what_ +
                      ": while tracing, tensors have no values yet and a value read now "
                      "would be baked into every replay; return the tensor from the function "
                      "and read it after the call");
}

const uint64_t* Recorder::random_counter(Generator& gen, uint64_t numel, Device device) {
  // A checkpoint's recompute reads the slot its first run made (core/random_tape.h).
  if (tide::detail::RandomTape* t = tide::detail::RandomTape::current())
    return t->traced(gen, numel, static_cast<const tide::detail::CaptureSink*>(this),
                     [&] { return new_random_counter(gen, numel, device); });
  return new_random_counter(gen, numel, device);
}

const uint64_t* Recorder::new_random_counter(Generator& gen, uint64_t numel, Device device) {
  RandomCounter c;
  c.gen = &gen;
  c.numel = numel;
  c.slot = std::make_unique<uint64_t[]>(2);
  const uint64_t* p = c.slot.get();
  if (!device.is_cpu()) {
    // A CUDA graph bakes its kernels' arguments in: the kernel reads the pair from device
    // memory, which each replay writes before the graph runs (trace/cuda/device_graph.cpp).
    tide::detail::CapturePause pause;
    c.device_slot = Allocator::get(device).allocate(2 * sizeof(uint64_t), "trace");
    p = static_cast<const uint64_t*>(c.device_slot->data());
  }
  g_->random.push_back(std::move(c));
  return p;
}

void Recorder::describe_next(const void* desc, size_t bytes) {
  TIDE_ASSERT(bytes == sizeof(tide::detail::ElementwiseDesc), "unexpected op description");
  next_desc_.emplace();
  std::memcpy(&*next_desc_, desc, bytes);
}

void Recorder::add_replay_hook(std::shared_ptr<tide::detail::ReplayHook> hook) {
  g_->replay_hooks.push_back(std::move(hook));
}

std::shared_ptr<Graph> Recorder::finish(std::vector<Tensor> outputs) {
  Graph& g = *g_;
  // A trace without ops runs where its inputs are.
  g.device = device_.value_or(input_device_.value_or(Device::cpu()));
  std::vector<bool> is_output(g.values.size(), false);
  for (const Tensor& t : outputs) {
    TIDE_CHECK(t.defined(), "trace", what_, " returned an undefined tensor");
    Graph::Output o;
    o.value = value_of(t.storage());
    o.shape = t.shape();
    o.dtype = t.dtype();
    o.offset = t.offset();
    if (size_t(o.value) >= is_output.size()) is_output.resize(size_t(o.value) + 1, false);
    is_output[size_t(o.value)] = true;
    g.outputs.push_back(std::move(o));
  }
  outputs.clear();  // drops the outputs and any autograd graph hanging from them

  for (const Node& n : g.nodes) {
    for (int v : n.reads) ++g.values[size_t(v)].num_readers;
    for (int v : n.writes) ++g.values[size_t(v)].num_writers;
  }
  // Per value: the first node touching it.
  std::vector<int> first(g.values.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (const std::vector<int>* list : {&g.nodes[n].reads, &g.nodes[n].writes})
      for (int v : *list)
        if (first[size_t(v)] < 0) first[size_t(v)] = int(n);
  std::vector<std::vector<Node>> inits(g.nodes.size());  // per node: to run before it
  for (size_t i = 0; i < g.values.size(); ++i) {
    Value& v = g.values[i];
    if (!created_[i]) continue;  // inputs and captures are what they are
    // Someone besides the graph (and the graphs of loops recorded in it) holds it.
    auto nested = nested_refs_.find(v.storage.get());
    bool escapes = v.storage->use_count() - (nested == nested_refs_.end() ? 0 : nested->second) > 1;
    if (escapes) v.kind = ValueKind::state;
    else if (v.num_writers == 0)
      v.kind = (v.num_readers || is_output[i]) ? ValueKind::constant : ValueKind::dead;
    else if (is_output[i]) v.kind = ValueKind::output;
    else v.kind = ValueKind::intermediate;
    if (v.kind == ValueKind::intermediate || v.kind == ValueKind::output ||
        v.kind == ValueKind::dead) {
      Storage* b = v.storage->drop_backing();
      // Host data a node then writes in place (from_data(...) then c.add_(x)): the host
      // fill ran once, at trace time, into memory the plan drops (the value gets an arena
      // range or a fresh output buffer per call), so a replay would see whatever that
      // memory held. Keep a private copy of the trace-time bytes and copy it into the
      // value's buffer, on every replay, just before the first node touching it: as
      // eager does, where the fill runs on every call. Host-filled: its lazy backing holds
      // memory, which only host code touching the bytes takes (Recorder::allocate); a
      // value the first node reads without any host fill was never defined, in eager too.
      if (b && b->resident() && v.bytes > 0 && v.kind != ValueKind::dead && first[i] >= 0 &&
          b->device().is_cpu()) {
        auto bytes = std::make_shared<std::vector<unsigned char>>(
            static_cast<const unsigned char*>(b->data()),
            static_cast<const unsigned char*>(b->data()) + v.bytes);
        Node init;
        init.op = "host_data";
        init.site = g.nodes[size_t(first[i])].site;
        init.writes.push_back(int(i));
        init.kernel = [bytes, slot = v.storage.get()](const KernelContext&) {
          if (!bytes->empty()) std::memcpy(slot->data(), bytes->data(), bytes->size());
        };
        init.fused_ops = 0;
        ++v.num_writers;
        inits[size_t(first[i])].push_back(std::move(init));
      }
      if (b) b->release();
      v.storage->rebind(nullptr);
    } else {
      v.storage->data();  // state and constants keep their memory: take it now if not yet
    }
  }
  if (std::any_of(inits.begin(), inits.end(), [](auto& l) { return !l.empty(); })) {
    std::vector<Node> nodes;
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      for (Node& init : inits[n]) nodes.push_back(std::move(init));
      nodes.push_back(std::move(g.nodes[n]));
    }
    g.nodes = std::move(nodes);
  }
  return std::move(g_);
}

}  // namespace tide::trace
