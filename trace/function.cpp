#include "trace/function.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "ops/autograd.h"
#include "trace/backend.h"
#include "trace/planner.h"
#include "trace/recorder.h"
#include "trace/remat.h"
#include "trace/replay.h"

namespace tide::trace {

bool ArgSignature::operator==(const ArgSignature& o) const {
  if (is_tensor != o.is_tensor) return false;
  if (is_tensor) return shape == o.shape && dtype == o.dtype && device == o.device;
  return value == o.value && type == o.type;
}

std::string RetraceReason::str() const {
  if (argument < 0) return "number of arguments " + before + " -> " + after;
  return "argument " + std::to_string(argument) + ": " + property + " " + before + " -> " + after;
}

namespace detail {

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

struct FunctionCore::Entry {
  Signature sig;
  std::shared_ptr<Graph> graph;
  PlanSummary plan;
  int fused = 0;
  RematReport remat;
};

namespace {
RetraceReason reason_for(const Signature& before, const Signature& after) {
  RetraceReason r;
  if (before.size() != after.size()) {
    r.property = "arity";
    r.before = std::to_string(before.size());
    r.after = std::to_string(after.size());
    return r;
  }
  for (size_t i = 0; i < before.size(); ++i) {
    const ArgSignature &a = before[i], &b = after[i];
    if (a == b) continue;
    r.argument = int(i);
    if (a.is_tensor != b.is_tensor || a.type != b.type) {
      r.property = "type";
      r.before = a.is_tensor ? "Tensor" : a.type;
      r.after = b.is_tensor ? "Tensor" : b.type;
    } else if (!a.is_tensor) {
      r.property = "value";
      r.before = a.value;
      r.after = b.value;
    } else if (a.shape != b.shape) {
      r.property = "shape";
      r.before = a.shape.str();
      r.after = b.shape.str();
    } else if (a.dtype != b.dtype) {
      r.property = "dtype";
      r.before = name(a.dtype);
      r.after = name(b.dtype);
    } else {
      r.property = "device";
      r.before = a.device.str();
      r.after = b.device.str();
    }
    return r;
  }
  return r;
}
}  // namespace

FunctionCore::FunctionCore(Options o, tide::SourceLocation site) : opt_(std::move(o)), site_(site) {
  TIDE_CHECK(opt_.cache_budget >= 1, "trace", "cache_budget must be >= 1, got ", opt_.cache_budget);
  TIDE_CHECK(opt_.warmup_calls >= 0, "trace", "warmup_calls must be >= 0, got ", opt_.warmup_calls);
  TIDE_CHECK(opt_.streams >= 1, "trace", "streams must be >= 1, got ", opt_.streams);
  TIDE_CHECK(opt_.loop_unroll >= 0 && opt_.loop_unroll <= 1024, "trace",
             "loop_unroll must be in [0, 1024] (0: chosen per loop; each iteration is a copy of "
             "the body in the graph), got ",
             opt_.loop_unroll);
}

FunctionCore::~FunctionCore() = default;

void FunctionCore::note_retrace(const Signature& sig) {
  if (stats_.traces == 0 || last_sig_.empty()) return;
  RetraceReason r = reason_for(last_sig_, sig);
  r.call = stats_.calls;
  stats_.retraces.push_back(r);
  trace_calls_.push_back(stats_.calls);
  int64_t recent = std::count_if(trace_calls_.begin(), trace_calls_.end(),
                                 [&](int64_t c) { return c > stats_.calls - 10; });
  if (recent >= 5 && !stats_.warned) {
    stats_.warned = true;
    std::cerr << "tide: trace::function '" << opt_.name << "' traced again " << recent
              << " times in its last 10 calls (latest: " << r.str()
              << "). Every new signature records and plans the whole function again; "
                 "keep tensor shapes fixed, and pass numbers that change every call as "
                 "tensors, not as C++ values.\n";
  }
}

std::shared_ptr<Graph> FunctionCore::trace(const Signature& sig, std::span<const Tensor> args,
                                           const Body& body) {
  Recorder rec("trace::function '" + opt_.name + "'");
  rec.set_fusion(opt_.fusion);
  rec.set_loop_unroll(opt_.loop_unroll);
  std::vector<Tensor> placeholders;
  for (const Tensor& a : args) placeholders.push_back(rec.placeholder(a));
  std::vector<Tensor> outs;
  {
    Recording on(rec);
    outs = body(placeholders);
  }
  placeholders.clear();
  std::shared_ptr<Graph> g = rec.finish(std::move(outs));
  auto e = std::make_unique<Entry>();
  e->sig = sig;
  if (opt_.verify) g->reference = g->nodes;
  e->fused = fuse(*g, opt_.fusion);
  g->streams = opt_.streams;
  if (opt_.memory_budget) e->remat = fit_budget(*g, opt_.memory_budget);
  stats_.remat = e->remat;  // memory_plan() reports it before any call
  e->plan = plan(*g);
  prepare_replay(*g);
  backend_for(g->device).prepare(*g, backend_state_);
  e->graph = g;
  cache_.push_front(std::move(e));
  if (cache_.size() > opt_.cache_budget) {
    cache_.pop_back();
    ++stats_.evictions;
  }
  ++stats_.traces;
  return g;
}

namespace {

// A replay redoes a backward's device work, not its host-side effect on a leaf's .grad: the
// call is refused (before anything is queued) when eager would treat the gradient
// otherwise than the recording did.
void check_grads(const Graph& g, const std::string& name) {
  for (const Graph::GradBinding& b : g.grad_bindings) {
    std::shared_ptr<TensorImpl> leaf = b.leaf.lock();
    if (!leaf || b.reset_first) continue;  // reset by the function: eager starts afresh too
    const char* why = nullptr;
    if (b.taken && leaf->grad)
      why =
          "eager would add this call's gradient to the one it has, but the traced "
          "backward makes a new one";
    else if (!b.taken && !leaf->grad)
      why =
          "eager would make a new gradient (it was reset since), but the traced backward "
          "adds to the one it had then";
    else if (!b.taken && leaf->grad != b.grad)
      why = "it is another tensor now, and the traced backward adds to the one it had then";
    if (why)
      throw Error("trace",
                  tide::detail::concat(
                      "trace::function '", name, "': the gradient of a parameter of shape ",
                      Tensor(leaf).shape().str(), " is not as when the function was traced: ", why,
                      "; call zero_grad() on the parameters inside the function, "
                      "before backward (as train::Trainer's step does)"));
  }
}

// After a call: the gradients the function makes are the leaves' .grad, as after eager's.
void bind_grads(const Graph& g) {
  for (const Graph::GradBinding& b : g.grad_bindings)
    if (std::shared_ptr<TensorImpl> leaf = b.leaf.lock(); leaf && b.taken) leaf->grad = b.grad;
}

}  // namespace

std::vector<Tensor> FunctionCore::call(Signature sig, std::span<const Tensor> args,
                                       const Body& body) {
  std::lock_guard lock(mu_);
  // A replay's arguments are bound to the graph's inputs, which carry no autograd history:
  // a gradient for them would be lost without a word.
  for (size_t k = 0; k < args.size() && autograd::grad_enabled(); ++k)
    TIDE_CHECK(!args[k].requires_grad(), "trace", "trace::function '", opt_.name,
               "': tensor argument ", k,
               " requires grad, and a traced function does not "
               "differentiate with respect to its arguments; pass arg.detach(), or let the "
               "function capture the tensor (as it does parameters) instead of passing it");
  auto it = std::find_if(cache_.begin(), cache_.end(), [&](auto& e) { return e->sig == sig; });
  if (it != cache_.end()) check_grads(*it->get()->graph, opt_.name);
  ++stats_.calls;
  std::shared_ptr<Graph> g;
  if (it != cache_.end()) {
    cache_.splice(cache_.begin(), cache_, it);  // most recently used first
    g = cache_.front()->graph;
  } else {
    int& warm = warmups_[sig_key(sig)];
    if (warm < opt_.warmup_calls) {
      ++warm;
      ++stats_.eager_calls;
      last_sig_ = sig;
      return body(args);
    }
    note_retrace(sig);
    g = trace(sig, args, body);
  }
  last_sig_ = std::move(sig);
  const Entry& e = *cache_.front();
  stats_.recorded_ops = g->recorded_ops;
  stats_.kernels = int(g->nodes.size());
  stats_.fused_kernels = e.fused;
  stats_.arena_bytes = e.plan.arena_bytes;
  stats_.unplanned_bytes = e.plan.unplanned_bytes;
  stats_.output_bytes = e.plan.output_bytes;
  stats_.persistent_bytes = e.plan.persistent_bytes;
  stats_.critical_path = g->deps.critical_path;
  stats_.remat = e.remat;
  const Backend& backend = backend_for(g->device);
  if (backend.runs_eagerly(*g, args)) {
    ++stats_.eager_calls;
    ++stats_.aliased_calls;
    return body(args);
  }
  ++stats_.replays;
  std::vector<Tensor> out;
  if (opt_.verify) {
    out = backend.verify(g, args, opt_.fusion, site_);
  } else {
    size_t allocated = 0;
    out = backend.replay(g, args, site_, &allocated);
    stats_.last_call_allocated = allocated;
  }
  bind_grads(*g);
  return out;
}

FunctionStats FunctionCore::stats() const {
  std::lock_guard lock(mu_);
  FunctionStats s = stats_;
  s.cached = cache_.size();
  s.measured_call_bytes = s.last_call_allocated;
  if (!cache_.empty()) {  // the most recently used entry: the last call's graph
    const Graph& g = *cache_.front()->graph;
    s.measured_call_bytes += g.run_allocated.load(std::memory_order_relaxed);
    s.compiled_chains = g.compiled_chains;
    s.chain_fallback = g.chain_fallback;
    const BackendStats b = backend_for(g.device).stats(g);
    s.graph_nodes = b.graph_nodes;
    s.graph_fallback = b.graph_fallback;
    s.graph_ordinary_edges_because = b.graph_ordinary_edges_because;
    s.graph_bytes = b.graph_bytes;
  }
  if (backend_state_) {
    BackendStats b;
    backend_state_->add_stats(b);
    s.graph_instantiations = b.graph_instantiations;
    s.graph_updates = b.graph_updates;
  }
  return s;
}

void FunctionCore::clear() {
  std::lock_guard lock(mu_);
  cache_.clear();
  warmups_.clear();
}

std::shared_ptr<Graph> FunctionCore::prepare(const Signature& sig, std::span<const Tensor> args,
                                             const Body& body) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(cache_.begin(), cache_.end(), [&](auto& e) { return e->sig == sig; });
  if (it != cache_.end()) return it->get()->graph;
  const int warm = warmups_[sig_key(sig)];
  TIDE_CHECK(warm >= opt_.warmup_calls, "trace", "trace::function '", opt_.name,
             "': cannot plan a signature before its warm-up calls (", warm, " of ",
             opt_.warmup_calls, " made): they make state the trace captures");
  return trace(sig, args, body);
}

std::shared_ptr<Graph> FunctionCore::graph_for(const Signature& sig) const {
  std::lock_guard lock(mu_);
  for (const auto& e : cache_)
    if (e->sig == sig) return e->graph;
  return nullptr;
}

std::string FunctionCore::sig_key(const Signature& sig) {
  std::ostringstream k;
  for (const ArgSignature& a : sig) {
    if (a.is_tensor) k << 'T' << a.shape.str() << name(a.dtype) << a.device.str() << ';';
    else k << a.type << '=' << a.value << ';';
  }
  return k.str();
}

}  // namespace detail
}  // namespace tide::trace
