#include "ops/autograd.h"

#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "core/engine/capture.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/memory_record.h"
#include "ops/autocast.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace tide::autograd {

namespace {
thread_local bool tl_grad_enabled = true;
std::atomic<uint64_t> g_node_seq{0};
}  // namespace

uint64_t detail::next_node_seq() { return g_node_seq.fetch_add(1, std::memory_order_relaxed); }

bool grad_enabled() { return tl_grad_enabled; }
// Blocks taken without recording are no op's saved activations: the memory recorder
// forgets them on both edges (a backward pass, an optimizer step, an evaluation).
NoGrad::NoGrad() : prev_(tl_grad_enabled) {
  tl_grad_enabled = false;
  if (memory::detail::on()) [[unlikely]]
    memory::detail::forget_taken();
}
NoGrad::~NoGrad() {
  tl_grad_enabled = prev_;
  if (memory::detail::on()) [[unlikely]]
    memory::detail::forget_taken();
}
// The same edges for the memory recorder: what was taken before recording turned on (a
// backward pass's gradients) and what is left untaken by a recorded op is no activation.
EnableGrad::EnableGrad() : prev_(tl_grad_enabled) {
  tl_grad_enabled = true;
  if (memory::detail::on()) [[unlikely]]
    memory::detail::forget_taken();
}
EnableGrad::~EnableGrad() {
  tl_grad_enabled = prev_;
  if (memory::detail::on()) [[unlikely]]
    memory::detail::forget_taken();
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!tl_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

void record_node(const char* op, Tensor& out, std::initializer_list<const Tensor*> inputs,
                 BackwardFn fn) {
  auto node = std::make_shared<Node>();
  node->op = op;
  for (const Tensor* t : inputs) {
    Edge e;
    if (t->defined() && t->requires_grad()) {
      if (t->impl().grad_fn) e.fn = t->impl().grad_fn;
      else e.leaf = t->impl_ptr();
    }
    node->next.push_back(std::move(e));
  }
  node->backward = std::move(fn);
  out.impl().requires_grad = true;
  out.impl().grad_fn = std::move(node);
  if (memory::detail::on()) [[unlikely]]
    memory::detail::on_recorded_op();
}

void record_refusal(const char* op, Tensor& out, std::string why) {
  if (!grad_enabled()) return;
  auto node = std::make_shared<Node>();
  node->op = op;
  node->refusal = std::move(why);
  out.impl().requires_grad = true;
  out.impl().grad_fn = std::move(node);
}

namespace {
// True when nobody but the backward pass can see g: its TensorImpl has only the
// `transient` references the pass drops right after, it has no history, and its storage,
// every byte of it, belongs to that TensorImpl alone (queued tasks aside). Such a gradient
// can become a leaf's .grad as it is (PyTorch's AccumulateGrad takes it the same way);
// any other is copied, so that a later in-place accumulation never writes into a tensor
// someone else holds: the caller's seed, a gradient two inputs share (add), a view.
bool can_take(const Tensor& g, long transient) {
  if (g.impl_ptr().use_count() != transient) return false;
  const TensorImpl& i = g.impl();
  if (i.offset != 0 || i.grad_fn || i.requires_grad) return false;
  Storage* s = g.storage();
  if (size_t(g.numel()) * size_of(g.dtype()) != s->requested_bytes()) return false;
  int owners = Engine::get().owner_count(s);
  // While a trace records, the values' storages are slots the recorder also holds; the
  // gradient taken is then state of the trace (trace/graph.h), as its copy would have been.
  if (tide::detail::CaptureSink* c = tide::detail::capturing()) owners -= c->references_held(s);
  else if (s->is_slot()) return false;  // a replay's binding, not a tensor's own memory
  return owners == 1;
}

// Adds g to leaf's .grad; the first gradient becomes .grad (taken when can_take, else a
// copy). `transient`: the references to g's TensorImpl that the caller drops afterwards.
void accumulate(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g, long transient) {
  const bool taken = !leaf->grad;
  if (taken) {
    leaf->grad = can_take(g, transient) ? g.impl_ptr() : clone(g).impl_ptr();
  } else {
    Tensor acc(leaf->grad);
    acc.add_(g);
  }
  if (tide::detail::CaptureSink* c = tide::detail::capturing())
    c->grad_bound(leaf, leaf->grad, taken);
  else if (taken && memory::detail::on()) [[unlikely]]
    memory::tag(Tensor(leaf->grad), memory::Role::gradient);
}
}  // namespace

}  // namespace tide::autograd

namespace tide {

using autograd::Node;

Tensor& Tensor::requires_grad_(bool on) {
  TIDE_CHECK(!on || is_floating(dtype()), "requires_grad",
             "only floating tensors can require grad, got ", dtype());
  TIDE_CHECK(is_leaf(), "requires_grad", "can only be set on leaves (tensors no op produced)");
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

void Tensor::zero_grad() {
  if (tide::detail::CaptureSink* c = tide::detail::capturing()) c->grad_reset(impl());
  impl().grad.reset();
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  TIDE_CHECK(requires_grad(), "backward",
             "the tensor does not require grad (no input of the ops behind it did)");
  if (grad.defined())
    TIDE_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
               "backward", "gradient of shape ", grad.shape().str(), " ", grad.dtype(), " on ",
               grad.device().str(), " for an output of shape ", shape().str(), " ", dtype(), " on ",
               device().str());
  else
    TIDE_CHECK(numel() == 1, "backward",
               "needs a gradient argument for a non-scalar output of shape ", shape().str());
  autograd::NoGrad no_grad;
  // Gradients keep the forward's dtypes: the ops of the backward see no autocast policy.
  autocast::Suspend no_autocast;
  if (is_leaf()) {
    // A caller's gradient is copied (the temporary copy of it makes two references).
    autograd::accumulate(impl_ptr(), grad.defined() ? grad : ones(shape(), dtype(), device()), 1);
    return;
  }
  // Reverse topological order by an iterative depth-first search; every check happens
  // before the first gradient op is queued, so a refused backward queues nothing.
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack{{impl().grad_fn.get(), 0}};
  seen.insert(impl().grad_fn.get());
  while (!stack.empty()) {
    auto& [n, i] = stack.back();
    if (i < n->next.size()) {
      Node* c = n->next[i++].fn.get();
      if (c && seen.insert(c).second) stack.push_back({c, 0});
    } else {
      order.push_back(n);
      stack.pop_back();
    }
  }
  for (Node* n : order) {
    TIDE_CHECK(n->refusal.empty(), "backward", n->refusal);
    TIDE_CHECK(!n->freed, "backward", "the graph through '", n->op,
               "' was freed by an earlier backward(); pass retain_graph=true to that call "
               "to backpropagate through it twice");
  }
  Tensor seed = grad.defined() ? grad : ones(shape(), dtype(), device());
  std::unordered_map<Node*, Tensor> grads;
  grads[order.back()] = seed;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    auto g = grads.find(n);
    if (g == grads.end()) continue;
    Tensor gout = g->second;
    grads.erase(g);
    std::vector<Tensor> gin = n->backward(gout);
    TIDE_ASSERT(gin.size() == n->next.size(), n->op, " returned ", gin.size(), " gradients");
    for (size_t i = 0; i < gin.size(); ++i) {
      const autograd::Edge& e = n->next[i];
      if (!gin[i].defined()) continue;
      if (e.fn) {
        auto [slot, fresh] = grads.try_emplace(e.fn.get(), gin[i]);
        if (!fresh) slot->second = slot->second + gin[i];
      } else if (e.leaf) {
        // gin[i], and gout too when the node passed its gradient through (add).
        autograd::accumulate(e.leaf, gin[i], 1 + long(gin[i].impl_ptr() == gout.impl_ptr()));
      }
    }
    if (!retain_graph) {
      n->backward = nullptr;
      n->freed = true;
    }
  }
}

}  // namespace tide
