// trace::function: captures a function once and replays it as one engine task (the
// counterpart of tf.function and CUDA graphs). Rules and design: docs/traced.md.
//
//   auto step = trace::function([&](const Tensor& x, const Tensor& y) { ... }, {.name = "step"});
//   Tensor loss = step(x, y);   // first call (per signature) traces and plans; later: replays
//
// A call does not wait: a replay is queued; its outputs are fresh tensors. A new signature
// traces again. Host reads inside f throw; errors inside a replay surface at the next sync.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/engine/capture.h"
#include "core/source_location.h"
#include "core/tensor.h"
#include "trace/fusion.h"
#include "trace/memory_plan.h"
#include "trace/remat.h"

namespace tide::trace {

struct Options {
  std::string name = "function";  // in warnings, errors and the profiler
  Fusion fusion = Fusion::none;
  // Check every call: run the recorded kernels unplanned and unfused (what eager runs)
  // and the planned program side by side on the same inputs, and throw tide::Error
  // naming the first node whose result differs (bitwise for Fusion::none, else beyond
  // fusion_tolerance). Waits; for debugging. On a GPU: the node-by-node launch against
  // the CUDA graph, comparing the outputs and persistent values each leaves (trace/cpu/verify.h).
  bool verify = false;
  size_t cache_budget = 8;  // signatures kept; the least recently used is evicted
  int warmup_calls = 0;     // calls per new signature that run eagerly before tracing
  // Independent branches a replay may run at once. 1: the nodes run one after the other
  // on the replay's stream. n > 1: the replay is still one engine task, but its worker and
  // up to n - 1 threads of the intra-op pool run nodes whose inputs are ready (CUDA: the
  // branches of the captured graph). Results are identical; kernels then run
  // single-threaded each, and the planner shares memory only between values the
  // dependencies order (the arena may grow). Pays off for independent small ops (several
  // towers, per-parameter updates); a chain gains nothing. stats().critical_path over
  // stats().kernels is the parallelism there is. Calls whose tensor arguments alias each
  // other or a captured tensor run in program order.
  int streams = 1;
  // On a GPU, a trace::loop's body graph (a WHILE node) runs this many iterations per
  // launch, the remainder one per launch in a second WHILE node: launching a body graph
  // costs the device more than a small body's nodes. 0: chosen per loop, so that a launch
  // runs about 32 nodes (at most 16 iterations); 1: one iteration per launch. The results
  // are the same whatever it is. At most 1024: each iteration is a copy of the body's
  // nodes in the graph. Loops on the CPU, and fused one-kernel loops, ignore it.
  int loop_unroll = 0;
  // Bytes the planned peak (MemoryPlan::peak()) should fit in; 0: no budget. Over it, the
  // planner recomputes cheap elementwise activations before their backward uses instead of
  // keeping them (trace/remat.h: the heuristic), with the same results bit for bit;
  // stats().remat says what it chose and whether the budget was met. Sequential CPU traces
  // only (streams = 1); elsewhere it is ignored and stats().remat says so.
  size_t memory_budget = 0;
};

// One argument of a signature.
struct ArgSignature {
  bool is_tensor = false;
  Shape shape;
  DType dtype = DType::float32;
  Device device;
  std::string value;  // non-tensors: the value as text ("3", "0.5", "true", "\"x\"")
  std::string type;   // non-tensors: a type name for messages

  bool operator==(const ArgSignature& o) const;
};
using Signature = std::vector<ArgSignature>;

// Why a call traced again: which argument changed which property.
struct RetraceReason {
  int64_t call = 0;      // 1-based call number
  int argument = -1;     // 0-based; -1 when the argument count changed
  std::string property;  // "shape", "dtype", "device", "value", "type", "arity"
  std::string before, after;
  std::string str() const;  // "argument 1: shape [2, 3] -> [4, 3]"
};

struct FunctionStats {
  int64_t calls = 0;
  int64_t traces = 0;  // signatures traced (first trace included)
  int64_t replays = 0;
  int64_t eager_calls = 0;  // warm-up calls, nested calls and aliased_calls
  // On a GPU: calls run eagerly because an argument shares memory with another argument
  // or a captured tensor where the function writes one of them in place (the graph's
  // fixed input buffers would split what eager shares; trace/cuda/device_graph.h).
  int64_t aliased_calls = 0;
  int64_t evictions = 0;
  size_t cached = 0;                    // signatures in the cache now
  std::vector<RetraceReason> retraces;  // one per trace after the first
  bool warned = false;                  // the retrace warning was printed
  // The graph of the last call's signature.
  int recorded_ops = 0;        // ops recorded
  int kernels = 0;             // nodes in the planned program (fused runs count once)
  int fused_kernels = 0;       // of those, fused runs
  size_t arena_bytes = 0;      // planned peak of intermediates
  size_t unplanned_bytes = 0;  // the same without sharing
  size_t output_bytes = 0;     // planned bytes allocated per call (outputs)
  size_t persistent_bytes = 0;
  size_t last_call_allocated = 0;  // bytes the last replay allocated for its outputs
  // The check of planned against measured bytes: what the last replay that finished
  // allocated, its outputs plus what its kernels took while they ran (workspaces, e.g. a
  // large sum's partial results). Equal to last_call_allocated when the plan foresaw
  // everything; read it after a sync.
  size_t measured_call_bytes = 0;
  int critical_path = 0;  // kernels on the longest chain of dependencies
  // With Options::memory_budget: what the planner recomputed for the last traced signature,
  // its planned peak before and after, and whether the budget was met (trace/remat.h).
  RematReport remat;
  // On a GPU, the CUDA graph of the last call's signature, once its first replay ran (read
  // after a sync): its nodes (kernels plus input and output copies; 0 when none was
  // built), and why the nodes are launched one by one instead ("" when the graph runs).
  size_t graph_nodes = 0;
  std::string graph_fallback;
  // With programmatic edges wanted (cuda::programmatic_edges_wanted): why CUDA refused the
  // graph with them, so that it was built again with ordinary edges ("" when it was not).
  std::string graph_ordinary_edges_because;
  // On a GPU, the last call's graph's fused chains (fused_kernels, and those inside loop
  // bodies) that run as their own NVRTC-compiled kernels; the others run the step
  // interpreter, with the same results, and chain_fallback says why ("" when none does).
  // Set when the trace is prepared.
  int compiled_chains = 0;
  std::string chain_fallback;
  // On a GPU, the CUDA graphs built so far (read after a sync): instantiated, or updated in
  // place from an evicted signature's exec of the same topology (cudaGraphExecUpdate,
  // which costs less host time than an instantiation).
  int64_t graph_instantiations = 0;
  int64_t graph_updates = 0;
  // On a GPU, what the graph holds besides the arena, allocated once at the trace: the
  // inputs' and outputs' fixed buffers and the captured kernels' workspace.
  size_t graph_bytes = 0;
};

struct Graph;
struct BackendState;

namespace detail {

// The type-erased part of trace::function (trace/function.cpp).
class FunctionCore {
 public:
  FunctionCore(Options o, tide::SourceLocation site);
  ~FunctionCore();

  using Body = std::function<std::vector<Tensor>(std::span<const Tensor> tensor_args)>;
  // Looks the signature up; traces on a miss (calling body with placeholders), then
  // replays. Eager (warm-up) calls run body on the arguments themselves.
  std::vector<Tensor> call(Signature sig, std::span<const Tensor> tensor_args, const Body& body);
  FunctionStats stats() const;
  void clear();
  const Options& options() const { return opt_; }
  // The graph cached for `sig`, or nullptr (tests inspect plans through it).
  std::shared_ptr<Graph> graph_for(const Signature& sig) const;
  // The graph of `sig`: cached, or traced and planned now without a replay (no call is
  // counted). Throws "[trace]" while warm-up calls remain for `sig` (they make state the
  // trace must capture, such as an optimizer's moments) and what tracing throws.
  std::shared_ptr<Graph> prepare(const Signature& sig, std::span<const Tensor> tensor_args,
                                 const Body& body);

 private:
  struct Entry;
  std::shared_ptr<Graph> trace(const Signature& sig, std::span<const Tensor> args,
                               const Body& body);
  void note_retrace(const Signature& sig);
  static std::string sig_key(const Signature& sig);

  Options opt_;
  tide::SourceLocation site_;
  std::list<std::unique_ptr<Entry>> cache_;  // most recently used first
  FunctionStats stats_;
  std::vector<int64_t> trace_calls_;  // call numbers that traced
  Signature last_sig_;
  std::unordered_map<std::string, int> warmups_;  // eager calls made per signature
  // The backend's state across signatures (a GPU's evicted signatures' graph execs).
  std::shared_ptr<BackendState> backend_state_;
  // Recursive: f may call itself eagerly (a warm-up or aliased call runs f under the lock)
  // or read stats() while it is traced.
  mutable std::recursive_mutex mu_;
};

std::string format_double(double v);

// Signature entries and placeholder substitution for one argument.
template <class A>
ArgSignature signature_of(const A& a) {
  using T = std::remove_cvref_t<A>;
  ArgSignature s;
  if constexpr (std::is_same_v<T, Tensor>) {
    s.is_tensor = true;
    s.shape = a.shape();
    s.dtype = a.dtype();
    s.device = a.device();
  } else if constexpr (std::is_same_v<T, bool>) {
    s.value = a ? "true" : "false";
    s.type = "bool";
  } else if constexpr (std::is_enum_v<T>) {
    s.value = std::to_string(static_cast<int64_t>(a));
    s.type = "enum";
  } else if constexpr (std::is_integral_v<T>) {
    s.value = std::to_string(a);
    s.type = "integer";
  } else if constexpr (std::is_floating_point_v<T>) {
    s.value = format_double(double(a));
    s.type = "floating";
  } else if constexpr (std::is_convertible_v<const T&, std::string>) {
    s.value = "\"" + std::string(a) + "\"";
    s.type = "string";
  } else {
    static_assert(sizeof(T) == 0,
                  "trace::function arguments must be Tensors, numbers, bools, enums or strings");
  }
  return s;
}

template <class A>
decltype(auto) substitute(A&& a, std::span<const Tensor> tensors, size_t& k) {
  if constexpr (std::is_same_v<std::remove_cvref_t<A>, Tensor>) return tensors[k++];
  else return std::forward<A>(a);
}

// Output flattening for the return types trace::function supports.
template <class R>
struct Outputs {
  static_assert(sizeof(R) == 0,
                "a traced function returns void, Tensor, std::vector<Tensor>, or a "
                "std::pair/std::tuple of Tensors");
};
template <>
struct Outputs<Tensor> {
  static std::vector<Tensor> flatten(Tensor t) { return {std::move(t)}; }
  static Tensor unflatten(std::vector<Tensor>& v) { return std::move(v.at(0)); }
};
template <>
struct Outputs<std::vector<Tensor>> {
  static std::vector<Tensor> flatten(std::vector<Tensor> t) { return t; }
  static std::vector<Tensor> unflatten(std::vector<Tensor>& v) { return std::move(v); }
};
template <class... Ts>
struct Outputs<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "tuple elements must be Tensors");
  static std::vector<Tensor> flatten(std::tuple<Ts...> t) {
    return std::apply([](auto&... x) { return std::vector<Tensor>{std::move(x)...}; }, t);
  }
  static std::tuple<Ts...> unflatten(std::vector<Tensor>& v) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<Ts...>{std::move(v.at(I))...};
    }
    (std::index_sequence_for<Ts...>{});
  }
};
template <class A, class B>
struct Outputs<std::pair<A, B>> {
  static_assert(std::is_same_v<A, Tensor> && std::is_same_v<B, Tensor>, "pair of Tensors");
  static std::vector<Tensor> flatten(std::pair<A, B> t) {
    return {std::move(t.first), std::move(t.second)};
  }
  static std::pair<A, B> unflatten(std::vector<Tensor>& v) {
    return {std::move(v.at(0)), std::move(v.at(1))};
  }
};

}  // namespace detail

template <class F>
class Function {
 public:
  Function(F f, Options o, tide::SourceLocation site)
      : f_(std::make_shared<F>(std::move(f))),
        core_(std::make_shared<detail::FunctionCore>(std::move(o), site)) {}

  // Traces or replays (see the top of this file). Does not wait, except with verify.
  // Throws what f throws while tracing (the cache is left as it was).
  template <class... Args>
  auto operator()(Args&&... args) {
    using R = std::invoke_result_t<F&, Args&...>;
    if (tide::detail::capturing()) return (*f_)(args...);  // nested: the outer trace records
    Signature sig{detail::signature_of(args)...};
    std::vector<Tensor> tensors;
    (collect(tensors, args), ...);
    std::vector<Tensor> out = core_->call(std::move(sig), tensors, body_of(args...));
    if constexpr (!std::is_void_v<R>) return detail::Outputs<R>::unflatten(out);
  }

  FunctionStats stats() const { return core_->stats(); }
  // Drops every cached graph (and what they hold: arenas, state, constants).
  void clear() { core_->clear(); }
  // The memory of a replay with these arguments, by role (trace/memory_plan.h), before any
  // replay runs: traces and plans the signature now if it is not cached (without running
  // it). Throws "[trace]" while warm-up calls remain for the signature, and what tracing
  // throws. Does not wait.
  template <class... Args>
  MemoryPlan memory_plan(Args&&... args) {
    Signature sig{detail::signature_of(args)...};
    std::vector<Tensor> tensors;
    (collect(tensors, args), ...);
    return trace::memory_plan(*core_->prepare(sig, tensors, body_of(args...)));
  }
  // The graph cached for the signature of these arguments, or nullptr.
  template <class... Args>
  std::shared_ptr<Graph> graph(const Args&... args) const {
    return core_->graph_for(Signature{detail::signature_of(args)...});
  }

 private:
  // f called with the tensor arguments replaced by ts (placeholders while tracing, the
  // arguments themselves for an eager call), its result flattened. Holds args by reference.
  template <class... Args>
  auto body_of(Args&... args) {
    return [this, &args...](std::span<const Tensor> ts) -> std::vector<Tensor> {
      using R = std::invoke_result_t<F&, Args&...>;
      size_t k = 0;
      // A braced list evaluates left to right: tensor k goes to the k-th Tensor argument.
      std::tuple<decltype(detail::substitute(args, ts, k))...> call_args{
          detail::substitute(args, ts, k)...};
      if constexpr (std::is_void_v<R>) {
        std::apply(*f_, call_args);
        return {};
      } else {
        return detail::Outputs<R>::flatten(std::apply(*f_, call_args));
      }
    };
  }
  template <class A>
  static void collect(std::vector<Tensor>& out, const A& a) {
    if constexpr (std::is_same_v<std::remove_cvref_t<A>, Tensor>) out.push_back(a);
  }
  std::shared_ptr<F> f_;
  std::shared_ptr<detail::FunctionCore> core_;
};

// Wraps f (any callable taking Tensors and plain values) into a traced callable.
// `site` (the caller) names the replay task in errors and the profiler.
template <class F>
Function<std::decay_t<F>> function(F&& f, Options o = {},
                                   tide::SourceLocation site = tide::SourceLocation::current()) {
  return Function<std::decay_t<F>>(std::forward<F>(f), std::move(o), site);
}

}  // namespace tide::trace
