// Random autograd graphs, part of the seeded random API driver: 1-3 leaves that
// require grad, 1-7 random differentiable ops over them and constants (broadcasting ops,
// scalar forms, unary functions, reductions, views, transpose, matmul, linear, softmax,
// clone, copies between the CPU and the fake GPU), then backward() through a weighted sum,
// or with a gradient argument. Every leaf's gradient is checked against central
// differences of the reference graph in double precision; leaves the output does not
// depend on get no gradient; retain_graph, a second backward through a freed graph,
// zero_grad and NoGrad are exercised on the way.
//
// Inputs stay away from the kinks (relu, abs, maximum, max ties) and the poles (div, log,
// pow), so the finite differences are smooth. Not covered: gradients of in-place updates
// (refused while recording) and of ops with no gradient (comparisons, argmax).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/api/api_driver.h"
#include "tests/api/api_generators.h"
#include "tests/api/api_ops.h"

namespace tide::api {
namespace {

using Refs = std::vector<Ref>;
using Eval = std::function<Expect(const Refs&)>;

// A copy of r's values in dtype t (constants meet a graph evaluated in float64).
Ref retype(const Ref& r, DType t) {
  if (r.dtype == t) return r;
  return map1(r, t, [](El e) { return e; });
}

struct Node {
  Val v;
  Eval eval;          // the reference from the nodes before it; empty for leaves
  uint32_t deps = 0;  // bit i: depends on leaf i
};

class Graph {
 public:
  Graph(Case& c, DType t) : c(c), t(t) {}
  Case& c;
  const DType t;
  std::vector<Node> nodes;
  int leaves = 0;

  const Val& at(int i) const { return nodes[size_t(i)].v; }
  int pick() {
    return c.chance(0.6) ? int(nodes.size()) - 1 : int(c.uniform(0, int64_t(nodes.size()) - 1));
  }
  Refs refs() const {
    Refs r;
    for (const Node& n : nodes) r.push_back(n.v.r);
    return r;
  }
  // Values away from 0: U(0.3, 1.5) with a random sign.
  std::vector<double> away(int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = (c.chance(0.5) ? -1 : 1) * c.real(0.3, 1.5);
    return v;
  }
  Val constant(const Shape& s, Device d) { return make_val(c, s, t, d, away(s.numel())); }

  void add_leaf(const Shape& s) {
    Val v = make_val(c, s, t, c.device, away(s.numel()));
    c.call(Case::d(v) + ".requires_grad_()", "", [&] { v.t.requires_grad_(); });
    v.requires_grad = true;
    nodes.push_back({v, {}, 1u << leaves});
    ++leaves;
  }
  // Runs a valid, recorded call; its result is checked against eval (now and, with every
  // other result, at the end of the case).
  void add(const std::string& text, std::initializer_list<int> inputs,
           const std::function<Tensor()>& run, Eval eval) {
    Expect e = eval(refs());
    if (!e.invalid.empty())
      c.fail("the graph builder made an invalid call (" + e.invalid + "): " + text);
    uint32_t deps = 0;
    for (int i : inputs) deps |= nodes[size_t(i)].deps;
    Tensor y;
    c.call(c.next_name() + " = " + text, "", [&] { y = run(); });
    const Val& v = c.add(y, e.r, y.defined() ? y.device() : c.device, true, false);
    nodes.push_back({v, std::move(eval), deps});
  }
  // Every node's reference with the leaves replaced by `leaf_refs`.
  Refs evaluate(const Refs& leaf_refs) const {
    Refs r(leaf_refs);
    for (size_t i = size_t(leaves); i < nodes.size(); ++i) r.push_back(nodes[i].eval(r).r);
    return r;
  }
};

// ---- conditions that keep finite differences smooth ---------------------------------------

bool all_of(const Ref& r, const std::function<bool(double)>& p) {
  for (int64_t i = 0; i < r.numel(); ++i)
    if (!p(r.at(i).v)) return false;
  return true;
}
bool pairs_apart(const Ref& a, const Ref& b, double gap) {
  std::optional<Shape> s = broadcast(a.shape, b.shape);
  for (int64_t i = 0; i < s->numel(); ++i)
    if (std::fabs(a.at(broadcast_index(*s, a.shape, i)).v -
                  b.at(broadcast_index(*s, b.shape, i)).v) < gap)
      return false;
  return true;
}
// Each reduced group's maximum is ahead of the rest by `gap`.
bool clear_max(const Ref& a, std::optional<int> axis, double gap) {
  int64_t outer = 1, n = a.numel(), inner = 1;
  if (axis) {
    const int ax = *axis < 0 ? *axis + a.shape.ndim() : *axis;
    for (int i = 0; i < ax; ++i) outer *= a.shape[i];
    n = a.shape[ax];
    for (int i = ax + 1; i < a.shape.ndim(); ++i) inner *= a.shape[i];
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<double> g;
      for (int64_t k = 0; k < n; ++k) g.push_back(a.at((o * n + k) * inner + i).v);
      std::sort(g.rbegin(), g.rend());
      if (g.size() > 1 && g[0] - g[1] < gap) return false;
    }
  return true;
}
constexpr double kGap = 1e-2;  // far above the finite-difference step

// A shape broadcasting to s: some dims 1, or fewer leading dims.
Shape smaller_shape(Case& c, const Shape& s) {
  std::vector<int64_t> d = s.vec();
  if (!d.empty() && c.chance(0.3)) d.erase(d.begin(), d.begin() + c.uniform(1, int64_t(d.size())));
  for (auto& x : d)
    if (c.chance(0.3)) x = 1;
  return Shape(d);
}

// ---- node generators: false when they do not apply to the graph as it is ------------------

bool op_binary(Graph& g) {
  static const char* names[] = {"add", "sub", "mul", "div", "maximum"};
  const char* want = names[g.c.uniform(0, 4)];
  const BinaryOp* op = nullptr;
  for (const BinaryOp& o : binary_ops())
    if (std::string(o.name) == want) op = &o;
  const int i = g.pick();
  const Val a = g.at(i);
  std::vector<int> others;
  for (size_t j = 0; j < g.nodes.size(); ++j)
    if (broadcast(a.r.shape, g.at(int(j)).r.shape) && g.at(int(j)).t.device() == a.t.device())
      others.push_back(int(j));
  const int j = g.c.chance(0.5) ? g.c.pick(others) : -1;
  const Val k = j >= 0 ? g.at(j) : g.constant(smaller_shape(g.c, a.r.shape), a.t.device());
  const bool swap = g.c.chance(0.5);
  const Val& x = swap ? k : a;
  const Val& y = swap ? a : k;
  if (op->floating_only && !all_of(y.r, [](double v) { return std::fabs(v) >= 0.3; })) return false;
  if (std::string(op->name) == "maximum" && !pairs_apart(x.r, y.r, kGap)) return false;
  Eval eval = [=](const Refs& r) {
    Ref p = j >= 0 ? r[size_t(j)] : retype(k.r, r[size_t(i)].dtype);
    Ref q = r[size_t(i)];
    if (swap) std::swap(p, q);
    Ref out = map2(q, p, *broadcast(q.shape, p.shape), q.dtype,
                   [&](El u, El w) { return op->rule(u, w, q.dtype); });
    return Expect{out, ""};
  };
  g.add(
      std::string(op->name) + "(" + Case::d(x) + ", " + Case::d(y) + ")", {i, j >= 0 ? j : i},
      [=] { return op->call(x.t, y.t); }, eval);
  return true;
}

bool op_scalar(Graph& g) {
  const ScalarOp& op = g.c.pick(scalar_ops());
  if (op.mask) return false;
  const std::string n = op.name;
  const int i = g.pick();
  const Val a = g.at(i);
  double s = g.c.pick(std::vector<double>{0.5, -2, 1.5, 3, -0.75});
  if (n == "pow") s = g.c.pick(std::vector<double>{2, 3, 0.5, -1, 1.5});
  const bool positive_only = n == "rdiv" || (n == "pow" && s != 2 && s != 3);
  if (positive_only &&
      !all_of(a.r, [&](double v) { return (n == "rdiv" ? std::fabs(v) : v) >= 0.3; }))
    return false;
  if (n == "pow" && !all_of(a.r, [](double v) { return std::fabs(v) <= 10; })) return false;
  if (n == "maximum" && !all_of(a.r, [&](double v) { return std::fabs(v - s) >= kGap; }))
    return false;
  g.add(
      n + "(" + Case::d(a) + ", " + std::to_string(s) + ")", {i}, [=] { return op.call(a.t, s); },
      [=](const Refs& r) {
        const Ref& x = r[size_t(i)];
        return Expect{map1(x, x.dtype, [&](El e) { return op.rule(e, s, x.dtype); }), ""};
      });
  return true;
}

bool op_unary(Graph& g) {
  const UnaryOp& op = g.c.pick(unary_ops());
  const std::string n = op.name;
  const int i = g.pick();
  const Val a = g.at(i);
  std::function<bool(double)> ok = [](double) { return true; };
  if (n == "abs" || n == "relu") ok = [](double v) { return std::fabs(v) >= kGap; };
  if (n == "exp") ok = [](double v) { return std::fabs(v) <= 5; };
  if (n == "log" || n == "sqrt") ok = [](double v) { return v >= 0.3; };
  if (!all_of(a.r, ok)) return false;
  g.add(
      n + "(" + Case::d(a) + ")", {i}, [=] { return op.call(a.t); },
      [=](const Refs& r) {
        const Ref& x = r[size_t(i)];
        return Expect{map1(x, x.dtype, [&](El e) { return op.rule(e, x.dtype); }), ""};
      });
  return true;
}

bool op_reduce(Graph& g) {
  const Red k = g.c.pick(std::vector<Red>{Red::sum, Red::mean, Red::max});
  const int i = g.pick();
  const Val a = g.at(i);
  const int nd = a.r.shape.ndim();
  std::optional<int> axis;
  if (nd > 0 && g.c.chance(0.6)) axis = int(g.c.uniform(-nd, nd - 1));
  const bool keepdim = g.c.chance(0.5);
  if (k == Red::max && !clear_max(a.r, axis, kGap)) return false;
  g.add(
      std::string(red_name(k)) + "(" + Case::d(a) + (axis ? ", " + std::to_string(*axis) : "") +
          (axis && keepdim ? ", keepdim)" : ")"),
      {i}, [=] { return axis ? red_call(k, a.t, *axis, keepdim) : red_call(k, a.t); },
      [=](const Refs& r) { return reduce_ref(k, r[size_t(i)], axis, keepdim); });
  return true;
}

bool op_view(Graph& g) {
  const int i = g.pick();
  const Val a = g.at(i);
  const Shape& s = a.r.shape;
  const int kind = int(g.c.uniform(0, 2));
  if (kind > 0 && (s.ndim() == 0 || s[0] == 0)) return false;
  if (kind == 0) {
    std::vector<int64_t> d = g.c.pick(std::vector<std::vector<int64_t>>{{-1}, {1, -1}, {-1, 1}});
    if (s.ndim() >= 2 && g.c.chance(0.5)) d = {s[s.ndim() - 1], -1};
    g.add(
        Case::d(a) + ".reshape(...)", {i}, [=] { return a.t.reshape(d); },
        [=](const Refs& r) { return reshape_ref(r[size_t(i)], d); });
  } else if (kind == 1) {
    const int64_t b = g.c.uniform(0, s[0] - 1), e = g.c.uniform(b + 1, s[0]);
    g.add(
        Case::d(a) + ".slice(" + std::to_string(b) + ", " + std::to_string(e) + ")", {i},
        [=] { return a.t.slice(b, e); },
        [=](const Refs& r) { return slice_ref(r[size_t(i)], b, e); });
  } else {
    const int64_t k = g.c.uniform(0, s[0] - 1);
    g.add(
        Case::d(a) + "[" + std::to_string(k) + "]", {i}, [=] { return a.t[k]; },
        [=](const Refs& r) { return select_ref(r[size_t(i)], k); });
  }
  return true;
}

bool op_transpose(Graph& g) {
  const int i = g.pick();
  const Val a = g.at(i);
  if (a.r.shape.ndim() != 2) return false;
  g.add(
      "transpose(" + Case::d(a) + ")", {i}, [=] { return transpose(a.t); },
      [=](const Refs& r) { return transpose_ref(r[size_t(i)]); });
  return true;
}

bool op_matmul(Graph& g) {
  const int i = g.pick();
  const Val a = g.at(i);
  if (a.r.shape.ndim() != 2) return false;
  const bool left = g.c.chance(0.6);                      // the node is the left operand
  const bool tn = g.c.chance(0.3), tk = g.c.chance(0.3);  // flags of the node / the other
  // The node's contracted extent.
  const int64_t k = left ? a.r.shape[tn ? 0 : 1] : a.r.shape[tn ? 1 : 0];
  const int64_t n = g.c.uniform(1, 3);
  // The other operand: (k, n) on the right / (n, k) on the left, before its flag.
  Shape os = left ? (tk ? Shape{n, k} : Shape{k, n}) : (tk ? Shape{k, n} : Shape{n, k});
  const Val o = g.constant(os, a.t.device());
  const Val& x = left ? a : o;
  const Val& y = left ? o : a;
  const bool ta = left ? tn : tk, tb = left ? tk : tn;
  g.add(
      "matmul(" + Case::d(x) + ", " + Case::d(y) + ", {" + (ta ? "T" : "N") + (tb ? "T" : "N") +
          "})",
      {i},
      [=] {
        return matmul(x.t, y.t, MatmulOptions{ta, tb});
      },
      [=](const Refs& r) {
        const Ref& node = r[size_t(i)];
        const Ref other = retype(o.r, node.dtype);
        return left ? matmul_ref(node, other, ta, tb) : matmul_ref(other, node, ta, tb);
      });
  return true;
}

bool op_linear(Graph& g) {
  const int i = g.pick();
  const Val x = g.at(i);
  if (x.r.shape.ndim() != 2) return false;
  const int64_t m = g.c.uniform(1, 3);
  const Val w = g.constant(Shape{x.r.shape[1], m}, x.t.device());
  const Val b = g.constant(Shape{m}, x.t.device());
  bool relu_on = g.c.chance(0.5);
  if (relu_on &&
      !all_of(linear_ref(x.r, w.r, b.r, false).r, [](double v) { return std::fabs(v) >= kGap; }))
    relu_on = false;
  g.add(
      "linear(" + Case::d(x) + ", " + Case::d(w) + ", " + Case::d(b) + (relu_on ? ", relu)" : ")"),
      {i}, [=] { return linear(x.t, w.t, b.t, relu_on); },
      [=](const Refs& r) {
        const Ref& xr = r[size_t(i)];
        return linear_ref(xr, retype(w.r, xr.dtype), retype(b.r, xr.dtype), relu_on);
      });
  return true;
}

bool op_softmax(Graph& g) {
  const int i = g.pick();
  const Val a = g.at(i);
  if (a.r.shape.ndim() == 0) return false;
  const bool log_out = g.c.chance(0.5);
  g.add(
      std::string(log_out ? "log_softmax(" : "softmax(") + Case::d(a) + ")", {i},
      [=] { return log_out ? log_softmax(a.t) : softmax(a.t); },
      [=](const Refs& r) { return softmax_ref(r[size_t(i)], log_out); });
  return true;
}

bool op_copy(Graph& g) {
  const int i = g.pick();
  const Val a = g.at(i);
  const int kind = int(g.c.uniform(0, 2));
  const Device other = a.t.device().is_cpu() ? Device::cuda(kFakeGpu) : Device::cpu();
  const char* what[] = {"clone", "cast to its own dtype", "to"};
  g.add(
      std::string(what[kind]) + "(" + Case::d(a) + (kind == 2 ? ", " + other.str() + ")" : ")"),
      {i},
      [=] { return kind == 0   ? clone(a.t)
                   : kind == 1 ? cast(a.t, a.t.dtype())
                               : a.t.to(other); },
      [=](const Refs& r) { return cast_ref(r[size_t(i)], r[size_t(i)].dtype); });
  return true;
}

struct NodeGen {
  int weight;
  bool (*run)(Graph&);
};
const std::vector<NodeGen> kNodeGens = {
    {5, op_binary},    {4, op_scalar}, {4, op_unary},  {3, op_reduce},  {3, op_view},
    {1, op_transpose}, {2, op_matmul}, {1, op_linear}, {2, op_softmax}, {1, op_copy},
};

// ---- one case ------------------------------------------------------------------------------

void autograd_case(Case& c) {
  const DType t = c.chance(0.7) ? DType::float64 : DType::float32;
  Graph g(c, t);
  const int64_t nleaves = c.uniform(1, 3);
  for (int64_t l = 0; l < nleaves; ++l) {
    std::vector<int64_t> d = random_shape(c, 8, 3).vec();
    for (auto& x : d) x = std::max<int64_t>(x, 1);
    g.add_leaf(Shape(d));
  }
  int total = 0;
  for (const NodeGen& n : kNodeGens) total += n.weight;
  const int64_t nops = c.uniform(1, 7);
  for (int64_t made = 0, tries = 0; made < nops && tries < 50; ++tries) {
    int64_t k = c.uniform(0, total - 1);
    for (const NodeGen& n : kNodeGens)
      if ((k -= n.weight) < 0) {
        made += n.run(g);
        break;
      }
  }
  if (g.nodes.size() == size_t(g.leaves)) return;  // nothing applied (rare)
  const Val y = g.nodes.back().v;
  const uint32_t deps = g.nodes.back().deps;

  // The objective: sum(w * y), through an extra mul and sum, or backward(w); or y itself.
  const int mode = y.r.numel() == 1 && c.chance(0.2) ? 2 : int(c.uniform(0, 1));
  const Val w = g.constant(y.r.shape, y.t.device());
  auto objective = [&](const Refs& r) {
    const Ref& out = r.back();
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += (mode == 2 ? 1.0 : w.r.at(i).v) * out.at(i).v;
    return s;
  };
  Tensor loss = y.t;
  if (mode == 0)
    c.call("loss = sum(" + y.name + " * " + w.name + ")", "", [&] { loss = sum(y.t * w.t); });
  const bool retain = c.chance(0.25), twice_freed = !retain && c.chance(0.15);
  auto backward = [&](bool keep) {
    const std::string args = mode == 1 ? w.name + (keep ? ", true" : "")
                             : keep    ? "Tensor(), true"
                                       : "";
    c.call((mode == 0 ? "loss" : y.name) + ".backward(" + args + ")", "", [&] {
      if (mode == 1) y.t.backward(w.t, keep);
      else loss.backward(Tensor(), keep);
    });
  };
  if (c.chance(0.15)) {  // a gradient argument on the other device: refused at the call
    const Device other = y.t.device().is_cpu() ? Device::cuda(kFakeGpu) : Device::cpu();
    const std::string text = y.name + ".backward(" + w.name + " on " + other.str() + ")";
    if (!KnownDefects::backward_grad_on_other_device) {
      c.skip("backward_grad_on_other_device", text);
    } else {
      Tensor moved = w.t.to(other);
      c.call(text, "a gradient on another device", [&] { y.t.backward(moved, true); });
    }
  }
  backward(retain);
  if (retain) backward(false);
  if (twice_freed)
    c.call("backward again", "a second backward through a freed graph", [&] {
      if (mode == 1) y.t.backward(w.t);
      else loss.backward();
    });
  if (c.chance(0.1)) {
    NoGrad off;
    Tensor z;
    c.call("under NoGrad: z = " + y.name + " * 2", "", [&] { z = y.t * 2.0; });
    if (z.requires_grad()) c.fail("a result made under NoGrad requires grad");
  }
  if (g.nodes.size() > size_t(g.leaves) + 1 && g.nodes[size_t(g.leaves)].v.t.grad().defined())
    c.fail(g.nodes[size_t(g.leaves)].v.name + ", not a leaf, has a grad()");

  // Central differences of the objective over every leaf element, in double precision.
  Refs base;
  for (int l = 0; l < g.leaves; ++l) base.push_back(retype(g.at(l).r, DType::float64));
  const double factor = retain ? 2 : 1;  // two backward passes accumulate
  for (int l = 0; l < g.leaves; ++l) {
    const Val& leaf = g.at(l);
    const Tensor grad = leaf.t.grad();
    if (!(deps & (1u << l))) {
      if (grad.defined()) c.fail(leaf.name + " is not used by the output but has a grad()");
      continue;
    }
    if (!grad.defined()) c.fail(leaf.name + " has no grad() after backward()");
    std::vector<double> fd(static_cast<size_t>(leaf.r.numel()));
    double scale = 1;
    for (int64_t e = 0; e < leaf.r.numel(); ++e) {
      const double x0 = base[size_t(l)].at(e).v, h = 1e-6 * std::max(1.0, std::fabs(x0));
      double f[2];
      for (int side = 0; side < 2; ++side) {
        Refs moved = base;
        moved[size_t(l)] = map1(base[size_t(l)], DType::float64, [](El q) { return q; });
        moved[size_t(l)].set(e, {x0 + (side ? -h : h), 0});
        f[side] = objective(g.evaluate(moved));
        scale = std::max(scale, std::fabs(f[side]));
      }
      fd[size_t(e)] = factor * (f[0] - f[1]) / (2 * h);
      scale = std::max(scale, std::fabs(fd[size_t(e)]));
    }
    // float32 graphs compute in float32 forward and backward; float64 ones nearly exactly.
    const double rtol = t == DType::float32 ? 2e-3 : 1e-6,
                 atol = (t == DType::float32 ? 2e-3 : 1e-7) * scale;
    Ref want = fresh(leaf.r.shape, t);
    for (int64_t e = 0; e < want.numel(); ++e)
      want.set(e, {fd[size_t(e)], atol + rtol * std::fabs(fd[size_t(e)])});
    c.note("# check " + leaf.name + ".grad() against central differences");
    c.check(Val{grad, want, leaf.name + ".grad()"});
    if (grad.shape() != leaf.r.shape || grad.dtype() != t || grad.device() != leaf.t.device())
      c.fail(leaf.name + ".grad() is " + grad.shape().str() + " on " + grad.device().str());
  }
  if (c.chance(0.1)) {
    Val leaf = g.at(0);
    c.call(leaf.name + ".zero_grad()", "", [&] { leaf.t.zero_grad(); });
    if (leaf.t.grad().defined()) c.fail("grad() is still defined after zero_grad()");
  }
}

TEST(RandomApi, AutogradGraphs) { run_cases("RandomApi.AutogradGraphs", 0.2, autograd_case); }

}  // namespace
}  // namespace tide::api
