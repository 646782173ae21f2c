// Reverse-mode autograd. An op whose inputs require grad attaches a Node to its output:
// the node keeps what the gradient needs and a function from the output's gradient to the
// inputs' gradients, written with ordinary (queued) ops. backward() walks the nodes in
// reverse topological order and queues those ops; nothing here waits.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/op_traits.h"

namespace tide::autograd {

struct Edge {
  std::shared_ptr<Node> fn;          // the input's producing node, or
  std::shared_ptr<TensorImpl> leaf;  // a leaf that accumulates into .grad
};

// Gradients for each input, in order; an undefined Tensor means "no gradient".
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out)>;

namespace detail {
// A process-wide counter, one number per node made (relaxed atomic increment).
uint64_t next_node_seq();
}  // namespace detail

struct Node {
  const char* op;
  // When the node was made, in process order: a recompute (ops/checkpoint.h) tells the nodes
  // it made from older ones by it.
  uint64_t seq = detail::next_node_seq();
  std::vector<Edge> next;  // one per input (empty Edge for inputs that need no grad)
  BackwardFn backward;     // released after backward() unless retain_graph
  bool freed = false;
  std::string refusal;  // non-empty: no gradient flows through; backward() says this
};

// Is recording on for this thread? (NoGrad turns it off.)
bool grad_enabled();

// Turns recording off for this thread within its scope.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool prev_;
};

// Turns recording back on for this thread within its scope, inside a NoGrad or a backward
// pass (checkpoint's recompute records the graph it back-propagates through).
class EnableGrad {
 public:
  EnableGrad();
  ~EnableGrad();
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool prev_;
};

// True when recording is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Attaches a node to `out` when needs_grad(inputs): `fn` maps out's gradient to one
// gradient per input. Saved tensors that alias `out` must be captured detached.
void record_node(const char* op, Tensor& out, std::initializer_list<const Tensor*> inputs,
                 BackwardFn fn);
// The same, but builds the std::function only when a node is needed (hot path). The node
// is named by the op table (op_name), as the op's errors and profile rows are.
template <class F>
void record(OpId op, Tensor& out, std::initializer_list<const Tensor*> inputs, F&& fn) {
  if (needs_grad(inputs)) record_node(op_name(op), out, inputs, BackwardFn(std::forward<F>(fn)));
}
// Marks `out`, made by an op no gradient flows through although what it computed required
// grad (a traced trace::loop), when recording is on: out requires grad, so that a later
// backward() through it throws "[backward] <why>" before queuing anything, instead of
// leaving out's contribution out of the gradients without a word.
void record_refusal(const char* op, Tensor& out, std::string why);
// For a node named at run time (a copy named after its devices, a kernel entry's own name).
template <class F>
void record(const char* op, Tensor& out, std::initializer_list<const Tensor*> inputs, F&& fn) {
  if (needs_grad(inputs)) record_node(op, out, inputs, BackwardFn(std::forward<F>(fn)));
}

}  // namespace tide::autograd

namespace tide {
using autograd::NoGrad;
}
