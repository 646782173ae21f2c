#include "trace/loop.h"

// Random numbers in a loop body (trace/loop.h). Random ops in the body follow one rule in
// eager and traced mode, so a traced run draws the eager run's numbers bit for bit (same
// seed, same calls), and every call draws new ones:
//   - An int count: the body draws from its generator as the plain eager loop does
//     (iteration i gets the counters eager's iteration i reserves); the traced node
//     reserves the range of all n iterations when the replay is queued.
//   - A tensor count: the body draws from a sub-stream of its generator. When the loop
//     runs (in eager order among the random ops around it), it reserves ONE Philox block
//     (counter c = gen.reserve(4), key k = gen.seed()) and keys the sub-stream with
//     substream_key(k, c) = splitmix64(splitmix64(k) ^ c) (core/rng.h); iteration i,
//     random op j of the body draws at block i * S + prefix_j under that key (S: blocks
//     the body draws per iteration, prefix_j: blocks of its random ops before j). The
//     generator advances by exactly one block whatever n is, 0 included; the numbers
//     are independent of what the same body draws under an int count. Traced, the block
//     is reserved when the replay is queued and the key derived when the node runs.
//     Eager (core/random_scope.h), the block is reserved at the body's first random op
//     of iteration 0 (nothing can draw from that generator in between, so the order is
//     the same); with n == 0 the eager loop records the body once, without running it,
//     to learn its generator and reserves the block all the same — the body's C++ side
//     effects happen once then, and a body that cannot be recorded (it reads a value on
//     the host, so it cannot be traced either) reserves nothing. Random ops of zero
//     elements draw nothing and do not count. Nested loops compose: an inner loop draws
//     its range or block from the enclosing loop's sub-stream.
//   The body's random ops must share one generator ("[loop]" otherwise, traced at record
//   time, eager at the first draw of the second generator, or at n == 0 after recording).
//   A trace::function replayed inside an eager tensor-count body draws from the
//   sub-stream too (its ops are inlined when the enclosing loop is traced).

#include <cstring>
#include <memory>

#include "core/allocator.h"
#include "core/error.h"
#include "core/loop_count.h"
#include "core/random_scope.h"
#include "core/rng.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/op_util.h"
#include "trace/backend.h"
#include "trace/fusion.h"
#include "trace/loop_node.h"
#include "trace/planner.h"
#include "trace/recorder.h"
#include "trace/replay.h"

namespace tide::trace {

namespace {

void check_state(const std::vector<Tensor>& state, const char* op) {
  TIDE_CHECK(!state.empty(), op, "needs at least one state tensor");
  for (const Tensor& t : state) tide::detail::check_defined(t, op);
}

void check_step(const std::vector<Tensor>& state, const std::vector<Tensor>& next) {
  TIDE_CHECK(next.size() == state.size(), "loop", "the body returned ", next.size(),
             " tensors for ", state.size(), " state tensors");
  for (size_t j = 0; j < state.size(); ++j) {
    TIDE_CHECK(next[j].defined(), "loop", "the body returned an undefined tensor at ", j);
    TIDE_CHECK(next[j].shape() == state[j].shape() && next[j].dtype() == state[j].dtype(), "loop",
               "state ", j, " is ", tide::detail::describe(state[j]), " but the body returned ",
               tide::detail::describe(next[j]));
  }
}

// Which of a traced loop's results the eager loop would return requiring grad: a state
// the body computes from a tensor it captures that requires grad (next[k] requires grad
// after recording), or from a state that requires grad, initially or after an earlier
// iteration. The body's placeholders carry no autograd history, so the states' flow through
// the body comes from its recorded graph (which states each next state reads, directly or
// through in-place writes), taken to a fixpoint over the iterations. An int count of 0
// returns the initial states (copies); a tensor count may be 0 too, so its initial states
// count as well. Conservative: a state that needs grad after some iteration counts for all.
std::vector<bool> results_needing_grad(const std::vector<Tensor>& state,
                                       const std::vector<bool>& next_requires_grad,
                                       const LoopCount& count, const Graph& body) {
  const size_t k = state.size();
  std::vector<bool> initial(k), result(k);
  for (size_t j = 0; j < k; ++j) initial[j] = state[j].requires_grad();
  if (!count.tensor.defined() && count.fixed == 0) return initial;
  // reads[v][j]: value v of the body depends on state j.
  std::vector<std::vector<bool>> reads(body.values.size(), std::vector<bool>(k));
  for (size_t j = 0; j < k; ++j) reads[size_t(body.inputs[j])][j] = true;
  for (const Node& n : body.nodes) {
    std::vector<bool> m(k);
    for (int r : n.reads)
      for (size_t j = 0; j < k; ++j) m[j] = m[j] || reads[size_t(r)][j];
    for (int w : n.writes)
      for (size_t j = 0; j < k; ++j) reads[size_t(w)][j] = reads[size_t(w)][j] || m[j];
  }
  std::vector<bool> cur = initial;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < k; ++i) {
      bool needs = next_requires_grad[i];
      for (size_t j = 0; j < k && !needs; ++j)
        needs = cur[j] && reads[size_t(body.outputs[i].value)][j];
      if (needs && !cur[i]) cur[i] = changed = true;
      result[i] = result[i] || needs;
    }
  }
  if (count.tensor.defined())
    for (size_t i = 0; i < k; ++i) result[i] = result[i] || initial[i];
  return result;
}

std::vector<Tensor> traced_loop(Recorder& outer, const LoopCount& count, const LoopBody& body,
                                const std::vector<Tensor>& state, tide::SourceLocation site) {
  Recorder rec("trace::loop body");
  rec.set_fusion(outer.fusion());
  rec.set_loop_unroll(outer.loop_unroll());
  std::vector<Tensor> ph, next;
  for (const Tensor& t : state) ph.push_back(rec.placeholder(t));
  {
    Recording on(rec);
    next = body(ph);
  }
  check_step(state, next);
  std::vector<bool> next_requires_grad;
  for (const Tensor& t : next) next_requires_grad.push_back(t.requires_grad());
  std::vector<Storage*> body_inputs;
  for (const Tensor& p : ph) body_inputs.push_back(p.storage());
  ph.clear();
  std::shared_ptr<Graph> body_graph = rec.finish(std::move(next));
  const std::vector<bool> would_need_grad =
      results_needing_grad(state, next_requires_grad, count, *body_graph);
  // Eagerly, these results carry the gradient of every iteration; the loop node carries
  // none (its body ran once, here). They say so when a backward() reaches them.
  const auto refuse_gradients = [&](std::vector<Tensor> result) {
    const std::string where = tide::detail::concat(site.file_name(), ":", site.line());
    for (size_t k = 0; k < result.size(); ++k)
      if (would_need_grad[k])
        autograd::record_refusal(
            "loop", result[k],
            tide::detail::concat(
                "no gradient flows through the trace::loop at ", where, ", whose state ", k,
                " depends on tensors that require grad: in a traced function its body is "
                "recorded once, not per iteration; call backward() inside the loop body, unroll "
                "the loop with a C++ for loop in the traced function, or run the loop outside it"));
    return result;
  };
  outer.note_nested_references(*body_graph, rec);
  fuse(*body_graph, outer.fusion(), /*single_nodes=*/true);
  plan(*body_graph);
  prepare_replay(*body_graph);
  // The node itself is the backend's: the CPU's loop program or a GPU's WHILE node.
  LoopNode node{count, std::move(body_graph), std::move(body_inputs), state, nullptr, site};
  node.iterated = iterable(*node.body, node.body_inputs, state);
  return refuse_gradients(backend_for(node.body->device).add_loop(outer, std::move(node)));
}

// The body gets the state by value, as the traced loop node gives it (a copy in the loop's
// own buffers): a body that writes its state in place never writes the caller's tensors.
std::vector<Tensor> eager_loop(int64_t n, const LoopBody& body, std::vector<Tensor> state) {
  for (Tensor& t : state) t = clone(t);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<Tensor> next = body(state);
    check_step(state, next);
    state = std::move(next);
  }
  return state;
}

// Eager, tensor count: the body draws from a RandomScope, which reserves its one block at
// the body's first random op. With n == 0 the body does not run, so it is recorded once
// (never run) to learn its generator, and the block is reserved all the same, as the
// traced loop node does; a body that cannot be recorded (it reads a value on the host, so
// it cannot be traced either) reserves nothing.
std::vector<Tensor> eager_substream_loop(int64_t n, const LoopBody& body,
                                         std::vector<Tensor> state) {
  if (n > 0) {
    tide::detail::RandomScope scope;
    return eager_loop(n, body, std::move(state));
  }
  std::shared_ptr<Graph> g;
  try {
    Recorder rec("trace::loop body");
    std::vector<Tensor> ph, next;
    for (const Tensor& t : state) ph.push_back(rec.placeholder(t));
    {
      NoGrad no_grad;
      Recording on(rec);
      next = body(ph);
    }
    ph.clear();
    g = rec.finish(std::move(next));
  } catch (const std::exception&) {
    g = nullptr;
  }
  if (g)
    if (Generator* gen = substream_generator(*g)) reserve_random(*gen, 4);
  return eager_loop(0, body, std::move(state));
}

std::vector<Tensor> run_loop(const LoopCount& count, const LoopBody& body,
                             std::vector<Tensor> state, tide::SourceLocation site) {
  check_state(state, "loop");
  if (tide::detail::CaptureSink* c = tide::detail::capturing()) {
    auto* outer = dynamic_cast<Recorder*>(c);
    TIDE_CHECK(outer, "loop", "recording with an unknown capture sink");
    return traced_loop(*outer, count, body, state, site);
  }
  int64_t n = count.tensor.defined() ? count.tensor.item<int64_t>() : count.fixed;
  TIDE_CHECK(n >= 0, "loop", "count must be >= 0, got ", n);
  if (count.tensor.defined()) return eager_substream_loop(n, body, std::move(state));
  return eager_loop(n, body, std::move(state));
}

LoopCount count_of(const Tensor& n) {
  tide::detail::check_defined(n, "loop");
  TIDE_CHECK(n.numel() == 1, "loop", "the count must be a one-element tensor, got ",
             tide::detail::describe(n));
  // A compiled chain reads its count as float32, float64, int32 or int64 (ops/chain_source.cpp).
  if (is_half(n.dtype())) tide::detail::throw_half_unsupported(n.dtype(), "loop");
  return LoopCount{0, n};
}

LoopCount count_of(int64_t n) {
  TIDE_CHECK(n >= 0, "loop", "count must be >= 0, got ", n);
  return LoopCount{n, Tensor()};
}

LoopBody single(const std::function<Tensor(const Tensor&)>& f) {
  return [f](const std::vector<Tensor>& s) { return std::vector<Tensor>{f(s[0])}; };
}

}  // namespace

std::vector<Tensor> loop(int64_t n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site) {
  return run_loop(count_of(n), body, std::move(state), site);
}
std::vector<Tensor> loop(const Tensor& n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site) {
  return run_loop(count_of(n), body, std::move(state), site);
}
Tensor loop(int64_t n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site) {
  return run_loop(count_of(n), single(body), {state}, site)[0];
}
Tensor loop(const Tensor& n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site) {
  return run_loop(count_of(n), single(body), {state}, site)[0];
}

}  // namespace tide::trace
