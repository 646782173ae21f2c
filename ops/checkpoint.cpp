// checkpoint (ops/checkpoint.h): the first run under NoGrad inside a recording RandomTape,
// and a recording KeepTape, one node over the inputs, and its backward: the recompute with
// recording on inside replaying tapes, then a nested backward() from the recomputed output.
#include "ops/checkpoint.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "core/random_tape.h"
#include "ops/autocast.h"
#include "ops/autograd.h"
#include "ops/checkpoint_keep.h"
#include "ops/op_util.h"

namespace tide {

namespace {

constexpr const char* kOp = "checkpoint";

using detail::describe;
using detail::KeepTape;
using detail::KeptOutputs;
using detail::RandomDraw;
using detail::RandomTape;

std::string where(const Tensor& t) { return describe(t) + " on " + t.device().str(); }

void check_inputs(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  TIDE_CHECK(bool(fn), kOp, "needs a function, got an empty one");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TIDE_CHECK(inputs[i].defined(), kOp, "input ", i, " is undefined");
    TIDE_CHECK(inputs[i].device() == inputs[0].device(), kOp,
               "inputs on different devices: input 0 is ", where(inputs[0]), ", input ", i, " is ",
               where(inputs[i]));
  }
}

void check_output(const Tensor& out) {
  TIDE_CHECK(out.defined(), kOp, "the function returned an undefined tensor");
  TIDE_CHECK(is_floating(out.dtype()), kOp, "the function returned ", describe(out),
             "; the output of a checkpointed function carries a gradient, so it must be floating");
}

// What the first run kept for backward: the inputs (storage only, no history), which of
// them get a gradient, the output's description and the random draws.
struct Saved {
  CheckpointFn fn;
  std::vector<Tensor> inputs;
  std::vector<bool> needs_grad;
  Shape shape;
  DType dtype;
  Device device;
  std::vector<RandomDraw> draws;
  std::optional<DType> autocast;  // the first run's policy (ops/autocast.h)
  CheckpointOptions options;
  std::vector<KeptOutputs> kept;  // the outputs the options keep, in the order of their ops
};

// Throws unless every node the recompute's graph reaches from `out` was made by the recompute
// (seq >= first): an older node belongs to the enclosing graph, which the nested backward
// would run early and free under the outer pass's feet.
void check_own_graph(const Tensor& out, uint64_t first) {
  std::vector<autograd::Node*> stack{out.impl().grad_fn.get()};
  std::unordered_set<autograd::Node*> seen{stack.back()};
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    TIDE_CHECK(n->seq >= first, kOp,
               "the function reads a tensor that requires grad and was computed outside it (by '",
               n->op,
               "'); pass it to checkpoint as an input, so that its gradient flows back through the "
               "checkpoint");
    for (const autograd::Edge& e : n->next)
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
}

// The recompute and the nested backward: the inputs' gradients (undefined where none).
std::vector<Tensor> recompute_backward(Saved& s, const Tensor& grad_out) {
  autograd::EnableGrad enable;
  const uint64_t first = autograd::detail::next_node_seq();
  // Each input that needs a gradient enters as a fresh tensor whose node only catches the
  // gradient the nested backward sums for it (the enclosing graph is not entered).
  auto grads = std::make_shared<std::vector<Tensor>>(s.inputs.size());
  std::vector<Tensor> args(s.inputs.size());
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    args[i] = s.inputs[i].detach();
    if (!s.needs_grad[i]) continue;
    auto sink = std::make_shared<autograd::Node>();
    sink->op = "checkpoint input";
    sink->backward = [grads, i](const Tensor& g) {
      (*grads)[i] = g;
      return std::vector<Tensor>{};
    };
    args[i].impl().requires_grad = true;
    args[i].impl().grad_fn = std::move(sink);
  }
  Tensor out;
  {
    // The first run's autocast policy (backward() suspended the caller's).
    autocast::Restore policy(s.autocast);
    RandomTape tape(s.draws, RandomTape::Mode::replay, kOp);
    KeepTape keep(s.kept, s.options, KeepTape::Mode::replay);
    out = s.fn(args);
    tape.check_spent();
    keep.check_spent();
  }
  TIDE_CHECK(out.defined(), kOp, "the recompute returned an undefined tensor");
  TIDE_CHECK(out.shape() == s.shape && out.dtype() == s.dtype && out.device() == s.device, kOp,
             "the recompute returned ", where(out), " but the first run returned ", s.shape.str(),
             " ", s.dtype, " on ", s.device.str(), "; the function must compute the same each run");
  if (!out.requires_grad()) return std::vector<Tensor>(s.inputs.size());
  if (!out.is_leaf()) check_own_graph(out, first);
  out.backward(grad_out);
  return std::move(*grads);
}

}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params, const CheckpointOptions& options) {
  check_inputs(fn, inputs);
  bool needed = false;
  if (autograd::grad_enabled()) {
    for (const Tensor& t : inputs) needed = needed || t.requires_grad();
    for (const Tensor& p : params) needed = needed || (p.defined() && p.requires_grad());
  }
  if (!needed) {
    Tensor out = fn(inputs);
    check_output(out);
    return out;
  }
  auto saved = std::make_shared<Saved>();
  saved->options = options;
  Tensor out;
  {
    NoGrad no_grad;
    RandomTape tape(saved->draws, RandomTape::Mode::record, kOp);
    KeepTape keep(saved->kept, options, KeepTape::Mode::record);
    out = fn(inputs);
  }
  saved->autocast = autocast::active();
  check_output(out);
  // A fresh handle for the node: fn may return one of its inputs or a captured tensor.
  out = out.detach();
  saved->fn = fn;
  saved->shape = out.shape();
  saved->dtype = out.dtype();
  saved->device = out.device();
  // The node, built here because its inputs are a run-time list (autograd::record_node takes
  // a fixed one): an edge per input, as record_node makes them.
  auto node = std::make_shared<autograd::Node>();
  node->op = kOp;
  for (const Tensor& t : inputs) {
    saved->inputs.push_back(t.detach());
    saved->needs_grad.push_back(t.requires_grad());
    autograd::Edge e;
    if (t.requires_grad()) {
      if (t.impl().grad_fn) e.fn = t.impl().grad_fn;
      else e.leaf = t.impl_ptr();
    }
    node->next.push_back(std::move(e));
  }
  node->backward = [saved](const Tensor& g) { return recompute_backward(*saved, g); };
  out.impl().requires_grad = true;
  out.impl().grad_fn = std::move(node);
  return out;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Tensor>& params, const CheckpointOptions& options) {
  TIDE_CHECK(bool(fn), kOp, "needs a function, got an empty one");
  return checkpoint([fn](const std::vector<Tensor>& in) { return fn(in[0]); },
                    std::vector<Tensor>{input}, params, options);
}

}  // namespace tide
