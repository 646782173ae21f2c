// The generic op-test harness (docs/contributing.md, Tests). A case is (op, a callable building the
// op from input tensors, a double-precision reference written with plain loops, input shapes,
// dtypes, tolerances, an input generator kept away from kinks). run_cases() checks the op
// against the reference on every shape set and dtype of the case, and, for differentiable
// cases, compares the gradient from backward() with float64 central differences.
//
// Coverage: TIDE_OP_CASES and TIDE_OP_TEST register, at static initialisation, which ops
// their test checks (value and/or gradient); test_op_traits.cpp walks the op table and fails
// for any op without them. Registration sits next to the TEST it names, so an op is covered
// only by a test that exists.
//
// Also checked on every value run: the inputs are left unchanged (or, alternately, dropped
// before the output is read: the engine must keep them alive), views share their input's
// storage and other ops do not; on every gradient run, the output's autograd node is the
// op's, so a case cannot claim an op it does not build.
//
// Devices: run_case runs each case on the CPU and on every device of case_devices() where
// op_supported(device, op) (ggml's test-backend-ops is the model): inputs are made on the
// host and copied there, outputs and gradients copied back and checked against the same
// double-precision reference. Each test binary defines case_devices(): tide_ops_tests a
// recording fake of a GPU (tests/fake_gpu.h), tide_cuda_tests the real cuda:0.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "error_of.h"
#include "ops/ops.h"

namespace tide::test {

// ---- host-side values (the reference side) ------------------------------------------------

struct Array {
  Shape shape;
  std::vector<double> v;  // row-major
};

// NumPy broadcasting, written independently of tide's broadcast_shapes.
Shape broadcast_all(const std::vector<Shape>& shapes);
// out[i] = f(in_0[bi_0], in_1[bi_1], ...) with every input broadcast to the common shape.
Array map_broadcast(const std::vector<Array>& in,
                    const std::function<double(std::span<const double>)>& f);
// Reference helpers for the common shapes of reference.
std::function<Array(const std::vector<Array>&)> ref_unary(std::function<double(double)> f);
std::function<Array(const std::vector<Array>&)> ref_binary(std::function<double(double, double)> f);

// ---- input generators ---------------------------------------------------------------------

// Values for input `index` of n elements.
using GenFn = std::function<std::vector<double>(std::mt19937& rng, int64_t n, int index)>;
GenFn gen_uniform(double lo, double hi);
// sign * U(lo, hi): away from 0, for abs, relu, pow with negative exponents.
GenFn gen_away_from_zero(double lo, double hi);
// Integers in [lo, hi] (ties for eq; integer dtypes).
GenFn gen_ints(int lo, int hi);
// k * 0.2 + 0.05 + 0.1 * index: different inputs never tie (>= 0.1 apart) and |x| >= 0.05.
// For maximum and comparisons-with-gradients.
GenFn gen_lattice();
// A shuffled set of distinct values spaced 0.1 apart: no ties inside one tensor (max).
GenFn gen_distinct();
// A different generator per input (e.g. a divisor kept away from 0).
GenFn gen_each(std::vector<GenFn> per_input);

// ---- shapes ---------------------------------------------------------------------------------

using ShapeSet = std::vector<Shape>;  // one shape per input
using ShapesFn = std::function<std::vector<ShapeSet>(std::mt19937&)>;

Shape random_shape(std::mt19937& rng, int rank, int64_t lo, int64_t hi);
// One input: random ranks 1-4, 0-d, 0-extent, size-1 dims and one shape past the
// intra-op parallel grain (so the thread-pool path runs too).
std::vector<ShapeSet> unary_shapes(std::mt19937& rng);
// Two inputs: equal shapes, each side broadcasting, both broadcasting, 0-d, empty, size 1,
// and one large broadcasting pair.
std::vector<ShapeSet> binary_shapes(std::mt19937& rng);
// Two inputs where the second broadcasts into the first (in-place ops).
std::vector<ShapeSet> into_shapes(std::mt19937& rng);

// ---- cases ----------------------------------------------------------------------------------

struct Tol {
  double atol, rtol;
};

using BuildFn = std::function<Tensor(const std::vector<Tensor>&)>;
using RefFn = std::function<Array(const std::vector<Array>&)>;

struct OpCase {
  OpId op;
  BuildFn build;
  RefFn ref;
  ShapesFn shapes = unary_shapes;
  GenFn gen = gen_uniform(-2.0, 2.0);
  std::vector<DType> dtypes{DType::float32, DType::float64};
  // Output dtype for an input dtype; default: the same.
  std::function<DType(DType)> out_dtype = nullptr;
  Tol tol32{1e-6, 1e-5};    // when the input or the output is float32
  Tol tol64{1e-12, 1e-10};  // integer outputs are compared exactly
  // Gradient check (float64 inputs, central differences with step grad_eps).
  bool grad = false;
  double grad_eps = 1e-6;
  Tol grad_tol{1e-6, 1e-5};
  int64_t grad_max_numel = 100;  // shape sets with more input elements skip the check
  // The output's autograd node must carry this op name (default: the table name of op);
  // this ties the case to the op it claims to test.
  std::string node_name = {};
  std::string label = {};  // filled by the macros: "Suite.Name"
};

// The devices besides the CPU that cases run on; defined once per test binary.
std::vector<Device> case_devices();

// Runs the value check and, when c.grad, the gradient check, on the CPU and on each device
// of case_devices() that supports c.op. Failures are gtest failures naming the case, the
// device, the shapes, the dtype and the element.
void run_case(const OpCase& c);
void run_cases(const std::vector<OpCase>& cases, const char* label);

// ---- coverage registry ----------------------------------------------------------------------

enum class Check : uint8_t { value, grad };
struct Coverage {
  OpId op;
  Check check;
};
struct CoverageEntry {
  OpId op;
  Check check;
  std::string test;
};
const std::vector<CoverageEntry>& coverage();
bool register_coverage(const char* test, std::initializer_list<Coverage> items);
bool register_cases(const char* test, const std::vector<OpCase>& cases);
// Ops of `table` missing a value test, or (when differentiable) a gradient test; each as
// "name: no value test" / "name: no gradient test". Empty when fully covered.
std::vector<std::string> coverage_gaps(std::span<const OpTraits> table,
                                       const std::vector<CoverageEntry>& entries);

// ---- thread counts ----------------------------------------------------------------------------

// f() run with `a` and then `b` intra-op threads (the count before is put back): a kernel
// whose results must not depend on the thread count compares the two.
template <class F>
auto at_thread_counts(int a, int b, F f) {
  const int saved = num_threads();
  set_num_threads(a);
  auto first = f();
  set_num_threads(b);
  auto second = f();
  set_num_threads(saved);
  return std::make_pair(std::move(first), std::move(second));
}

// ---- errors ---------------------------------------------------------------------------------

// Adds a failure unless `what` contains every part (tests/error_of.h).
using test_util::expect_contains;

}  // namespace tide::test

// A TEST whose body returns the cases to run; registers value (and gradient) coverage of the
// cases' ops at static initialisation.
//   TIDE_OP_CASES(Elementwise, exp) { return {OpCase{.op = OpId::exp, ...}}; }
#define TIDE_OP_CASES(Suite, Name)                                                                \
  static std::vector<::tide::test::OpCase> tide_cases_##Suite##_##Name();                         \
  [[maybe_unused]] static const bool tide_reg_##Suite##_##Name =                                  \
      ::tide::test::register_cases(#Suite "." #Name, tide_cases_##Suite##_##Name());              \
  TEST(Suite, Name) { ::tide::test::run_cases(tide_cases_##Suite##_##Name(), #Suite "." #Name); } \
  static std::vector<::tide::test::OpCase> tide_cases_##Suite##_##Name()

// A hand-written TEST that covers the listed ops:
//   TIDE_OP_TEST(Creation, zeros, {OpId::zeros, Check::value})
#define TIDE_OP_TEST(Suite, Name, ...)                                  \
  [[maybe_unused]] static const bool tide_reg_##Suite##_##Name =        \
      ::tide::test::register_coverage(#Suite "." #Name, {__VA_ARGS__}); \
  TEST(Suite, Name)

// EXPECT_TIDE_ERROR(stmt, parts...) is in tests/error_of.h.
