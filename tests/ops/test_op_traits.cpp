// Walks the op table (docs/contributing.md, The op table): every op has a value test and, when
// differentiable, a gradient test registered by the other files of tests/ops; names and traits are
// consistent; every elementwise op names its functor, and the mask and floating_only columns
// are what the front-ends do. Also tests the two debug ops (fail, gate), which have no other home
// here. Does not test the ops' math: the per-family files do.
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Check;
using test::coverage;
using test::coverage_gaps;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "\n  " + x;
  return s;
}

TEST(OpTraits, EveryOpHasValueAndGradientTests) {
  std::vector<std::string> gaps = coverage_gaps(all_ops(), coverage());
  EXPECT_TRUE(gaps.empty()) << "ops without tests in tests/ops (add a TIDE_OP_CASES or "
                               "TIDE_OP_TEST covering them):"
                            << join(gaps);
}

// ops/cuda/elementwise.cu registers every listed functor and marks supported the ops
// has_elementwise_kernels() names: an elementwise row that named no functor would have no
// CUDA kernel, which only a GPU would notice.
TEST(OpTraits, EveryElementwiseOpNamesTheFunctorItsKernelsApply) {
  for (const OpTraits& t : all_ops()) {
    if (t.kind == OpKind::elementwise)
      EXPECT_TRUE(has_elementwise_kernels(t.id))
          << "'" << t.name << "' names no functor (ops/op_traits.cpp): it has no CUDA kernel";
    else EXPECT_EQ(t.functor, kernels::FunctorId::count_) << t.name << " is not elementwise";
    if (t.mask || t.floating_only)
      EXPECT_EQ(t.kind, OpKind::elementwise) << t.name << ": a trait of elementwise ops";
  }
}

// The front-ends read the mask and floating_only columns: on an integer tensor, exactly the
// floating_only ops throw and exactly the masks give float32.
TEST(OpTraits, MaskAndFloatingOnlyAreWhatTheOpsDo) {
  using Call = std::function<Tensor(const Tensor&)>;
  // A copy of a, then `op` on it in place with a.
  auto in_place = [](void (*op)(Tensor&, const Tensor&)) -> Call {
    return [op](const Tensor& a) {
      Tensor y = clone(a);
      op(y, a);
      return y;
    };
  };
  const std::map<OpId, Call> calls = {
      {OpId::add, [](const Tensor& a) { return add(a, a); }},
      {OpId::sub, [](const Tensor& a) { return sub(a, a); }},
      {OpId::mul, [](const Tensor& a) { return mul(a, a); }},
      {OpId::div, [](const Tensor& a) { return div(a, a); }},
      {OpId::maximum, [](const Tensor& a) { return maximum(a, a); }},
      {OpId::eq, [](const Tensor& a) { return eq(a, a); }},
      {OpId::gt, [](const Tensor& a) { return gt(a, a); }},
      {OpId::lt, [](const Tensor& a) { return lt(a, a); }},
      {OpId::relu_grad, [](const Tensor& a) { return relu_grad(a, a); }},
      {OpId::gelu_grad, [](const Tensor& a) { return gelu_grad(a, a); }},
      {OpId::gelu_tanh_grad, [](const Tensor& a) { return gelu_grad(a, a, GeluApprox::tanh); }},
      {OpId::dropout, [](const Tensor& a) { return dropout(a, 0.5, true); }},
      {OpId::neg, [](const Tensor& a) { return neg(a); }},
      {OpId::exp, [](const Tensor& a) { return exp(a); }},
      {OpId::log, [](const Tensor& a) { return log(a); }},
      {OpId::sqrt, [](const Tensor& a) { return sqrt(a); }},
      {OpId::abs, [](const Tensor& a) { return abs(a); }},
      {OpId::pow, [](const Tensor& a) { return pow(a, 2.0); }},
      {OpId::relu, [](const Tensor& a) { return relu(a); }},
      {OpId::sigmoid, [](const Tensor& a) { return sigmoid(a); }},
      {OpId::tanh, [](const Tensor& a) { return tanh(a); }},
      {OpId::gelu, [](const Tensor& a) { return gelu(a); }},
      {OpId::gelu_tanh, [](const Tensor& a) { return gelu(a, GeluApprox::tanh); }},
      {OpId::cast, [](const Tensor& a) { return cast(a, DType::int64); }},
      {OpId::add_, in_place([](Tensor& y, const Tensor& a) { y.add_(a); })},
      {OpId::sub_, in_place([](Tensor& y, const Tensor& a) { y.sub_(a); })},
      {OpId::mul_, in_place([](Tensor& y, const Tensor& a) { y.mul_(a); })},
      {OpId::copy_, in_place([](Tensor& y, const Tensor& a) { y.copy_(a); })},
  };
  for (const OpTraits& t : all_ops()) {
    if (t.kind != OpKind::elementwise) continue;
    auto call = calls.find(t.id);
    ASSERT_NE(call, calls.end()) << "add a call of '" << t.name << "' to this test";
    const Tensor a = full({3}, 2.0, DType::int32);
    if (t.floating_only) {
      EXPECT_THROW(call->second(a), Error) << t.name;
      continue;
    }
    Tensor y;
    EXPECT_NO_THROW(y = call->second(a)) << t.name;
    const DType want = t.mask ? DType::float32 : t.id == OpId::cast ? DType::int64 : DType::int32;
    EXPECT_EQ(y.dtype(), want) << t.name;
  }
}

TEST(OpTraits, GradientTestsOnlyForDifferentiableOps) {
  // A gradient check for an op the table calls non-differentiable means the table is wrong.
  for (const auto& e : coverage()) {
    ASSERT_LT(size_t(e.op), all_ops().size()) << e.test;
    if (e.check == Check::grad) {
      EXPECT_TRUE(op_traits(e.op).differentiable)
          << e.test << " checks the gradient of '" << op_name(e.op)
          << "', which the op table marks as not differentiable";
    }
  }
}

// Every op of the table runs on every device the cases run on (the fake GPU here, cuda:0
// in tide_cuda_tests): a GPU without one of the ops' kernels fails here, naming it.
TEST(OpTraits, EveryDeviceSupportsEveryOp) {
  for (Device d : test::case_devices())
    for (const OpTraits& t : all_ops())
      EXPECT_TRUE(op_supported(d, t.id)) << t.name << " has no kernel on " << d.str();
  EXPECT_FALSE(op_supported(Device::cuda(7), OpId::add)) << "a device this process lacks";
}

// The gap finder must be able to fail: a table with an op nobody tests.
TEST(OpTraits, CoverageGapsReportsMissingTests) {
  const OpTraits table[] = {
      {OpId::exp, "exp", OpKind::elementwise, true, false, true},
      {OpId::eq, "eq", OpKind::elementwise, true, false, false},
  };
  std::vector<test::CoverageEntry> none;
  std::vector<std::string> gaps = coverage_gaps(table, none);
  ASSERT_EQ(gaps.size(), 3u) << join(gaps);
  EXPECT_EQ(gaps[0], "exp: no value test");
  EXPECT_EQ(gaps[1], "exp: no gradient test");
  EXPECT_EQ(gaps[2], "eq: no value test");

  std::vector<test::CoverageEntry> some{{OpId::exp, Check::value, "t"},
                                        {OpId::eq, Check::value, "t"}};
  gaps = coverage_gaps(table, some);
  ASSERT_EQ(gaps.size(), 1u) << join(gaps);
  EXPECT_EQ(gaps[0], "exp: no gradient test");
  some.push_back({OpId::exp, Check::grad, "t"});
  EXPECT_TRUE(coverage_gaps(table, some).empty());
}

TEST(OpTraits, TableMatchesEnum) {
  auto ops = all_ops();
  ASSERT_EQ(ops.size(), size_t(OpId::count_));
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(size_t(ops[i].id), i) << ops[i].name;
    EXPECT_EQ(&op_traits(OpId(i)), &ops[i]);
    EXPECT_EQ(std::string(op_name(OpId(i))), std::string(ops[i].name));
  }
}

TEST(OpTraits, NamesUniqueNonEmptyAndIdentifiers) {
  std::set<std::string> seen;
  for (const OpTraits& t : all_ops()) {
    std::string n(t.name);
    EXPECT_FALSE(n.empty()) << "op " << size_t(t.id);
    EXPECT_TRUE(seen.insert(n).second) << "duplicate name " << n;
    // Names appear in "[name]" of errors and in profiles: plain identifiers.
    EXPECT_TRUE(std::all_of(n.begin(), n.end(), [](char c) {
      return std::islower(c) || std::isdigit(c) || c == '_';
    })) << n;
    // op_name returns a C string: it must end where the name ends.
    EXPECT_EQ(std::string(op_name(t.id)).size(), n.size()) << n;
  }
}

TEST(OpTraits, TraitsAreConsistent) {
  for (const OpTraits& t : all_ops()) {
    SCOPED_TRACE(std::string(t.name));
    std::string n(t.name);
    bool underscore = !n.empty() && n.back() == '_';
    // In-place ops write their inputs one index at a time and are named with a trailing
    // '_': elementwise ones (one output, fusable) or fused optimizer updates (several
    // outputs, not for the fuser).
    EXPECT_EQ(t.in_place, underscore);
    if (t.in_place) {
      EXPECT_TRUE(t.kind == OpKind::elementwise || t.kind == OpKind::optimizer);
      EXPECT_EQ(t.elementwise, t.kind == OpKind::elementwise);
      EXPECT_FALSE(t.differentiable) << "in-place ops are refused while recording";
    }
    if (t.kind == OpKind::optimizer) {
      EXPECT_TRUE(t.in_place) << "optimizer ops update in place";
    }
    bool shaped = t.kind == OpKind::reduction || t.kind == OpKind::linalg ||
                  t.kind == OpKind::view || t.kind == OpKind::conv;
    if (t.kind == OpKind::elementwise) {
      EXPECT_TRUE(t.elementwise) << "elementwise kind";
    }
    if (shaped) {
      EXPECT_FALSE(t.elementwise) << "reductions, linalg and views are not";
    }
    if (t.kind == OpKind::view) {
      EXPECT_TRUE(t.differentiable) << "views pass gradients";
    }
    if (t.kind == OpKind::debug) {
      EXPECT_FALSE(t.differentiable) << "debug ops";
    }
    // Creation ops other than copies (clone, to) take no tensor input: nothing to
    // differentiate.
    if (t.kind == OpKind::creation && t.id != OpId::clone && t.id != OpId::to) {
      EXPECT_FALSE(t.differentiable) << "creation op";
    }
  }
}

// Comparisons and argmax are marked non-differentiable: their outputs must not record.
TEST(OpTraits, NonDifferentiableOpsRecordNothing) {
  Tensor x = from_data({1, 2, 3, 4}, Shape{2, 2}, DType::float64).requires_grad_();
  Tensor y = from_data({4, 3, 2, 1}, Shape{2, 2}, DType::float64).requires_grad_();
  EXPECT_FALSE(eq(x, y).requires_grad());
  EXPECT_FALSE(gt(x, y).requires_grad());
  EXPECT_FALSE(lt(x, 2.0).requires_grad());
  EXPECT_FALSE(argmax(x).requires_grad());
  EXPECT_FALSE(argmax(x, 1).requires_grad());
  // ... and differentiable ones do.
  EXPECT_TRUE(add(x, y).requires_grad());
  EXPECT_TRUE(sum(x).requires_grad());
}

// ---- debug ops ------------------------------------------------------------------------------

TIDE_OP_TEST(DebugOps, FailPoisonsItsOutput, {OpId::fail, Check::value}) {
  Tensor in = ones({3});
  Tensor out = zeros({3});
  debug::fail(in, out, "boom from the test");
  Tensor later = add(out, 1.0);  // depends on the failed output: skipped, inherits it
  try {
    later.wait_to_read();
    ADD_FAILURE() << "the failure did not reach the dependent op";
  } catch (const Error& e) {
    test::expect_contains(e.what(), {"[fail]", "boom from the test"}, "later.wait_to_read()");
  }
  EXPECT_THROW(out.to_vector<float>(), Error);
  // The input is untouched and readable.
  EXPECT_EQ(in.to_vector<float>(), std::vector<float>({1, 1, 1}));
  try {
    wait_all();  // the pending failure was reported above; nothing else must be thrown
  } catch (const Error& e) {
    ADD_FAILURE() << "wait_all rethrew an already reported failure: " << e.what();
  }
}

TIDE_OP_TEST(DebugOps, GateRunsOnTheWorkerInOrder, {OpId::gate, Check::value}) {
  Tensor t = zeros({4}, DType::float64);
  std::atomic<int> ran{0};
  debug::gate(t, [&] { ran.fetch_add(1); });
  t.add_(ones({4}, DType::float64));  // queued after the gate: must see it ran first
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_EQ(ran.load(), 1);
  // An exception in the body fails the op like a kernel error.
  Tensor u = zeros({2});
  debug::gate(u, [] { throw std::runtime_error("gate body failed"); });
  try {
    u.wait_to_read();
    ADD_FAILURE() << "no error from a failing gate";
  } catch (const Error& e) {
    test::expect_contains(e.what(), {"[gate]", "gate body failed"}, "u.wait_to_read()");
  }
}

}  // namespace
}  // namespace tide
