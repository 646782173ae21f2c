// The op-test harness: reference helpers, generators, shape sets, the value and gradient
// checks, and the coverage registry. See op_harness.h.
#include "tests/ops/op_harness.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace tide::test {

// ---- reference helpers ----------------------------------------------------------------------

Shape broadcast_all(const std::vector<Shape>& shapes) {
  int rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.ndim());
  std::vector<int64_t> out(size_t(rank), 1);
  for (const Shape& s : shapes) {
    for (int i = 0; i < s.ndim(); ++i) {
      int64_t& o = out[size_t(rank - s.ndim() + i)];
      int64_t d = s[i];
      if (o == 1) o = d;
      else if (d != 1 && d != o) ADD_FAILURE() << "reference: shapes do not broadcast";
    }
  }
  return Shape(out);
}

Array map_broadcast(const std::vector<Array>& in,
                    const std::function<double(std::span<const double>)>& f) {
  std::vector<Shape> shapes;
  for (const Array& a : in) shapes.push_back(a.shape);
  Array out{broadcast_all(shapes), {}};
  int rank = out.shape.ndim();
  int64_t n = out.shape.numel();
  out.v.resize(size_t(n));
  std::vector<int64_t> idx(static_cast<size_t>(rank));
  std::vector<double> args(in.size());
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rem = flat;
    for (int d = rank - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % out.shape[d];
      rem /= out.shape[d];
    }
    for (size_t k = 0; k < in.size(); ++k) {
      const Shape& s = in[k].shape;
      int64_t off = 0;
      for (int d = 0; d < s.ndim(); ++d) {
        int64_t i = s[d] == 1 ? 0 : idx[size_t(rank - s.ndim() + d)];
        off = off * s[d] + i;
      }
      args[k] = in[k].v[size_t(off)];
    }
    out.v[size_t(flat)] = f(args);
  }
  return out;
}

RefFn ref_unary(std::function<double(double)> f) {
  return [f](const std::vector<Array>& in) {
    return map_broadcast(in, [&](std::span<const double> x) { return f(x[0]); });
  };
}

RefFn ref_binary(std::function<double(double, double)> f) {
  return [f](const std::vector<Array>& in) {
    return map_broadcast(in, [&](std::span<const double> x) { return f(x[0], x[1]); });
  };
}

// ---- generators -----------------------------------------------------------------------------

GenFn gen_uniform(double lo, double hi) {
  return [=](std::mt19937& rng, int64_t n, int) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng);
    return v;
  };
}

GenFn gen_away_from_zero(double lo, double hi) {
  return [=](std::mt19937& rng, int64_t n, int) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = (rng() & 1 ? 1.0 : -1.0) * u(rng);
    return v;
  };
}

GenFn gen_ints(int lo, int hi) {
  return [=](std::mt19937& rng, int64_t n, int) {
    std::uniform_int_distribution<int> u(lo, hi);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng);
    return v;
  };
}

GenFn gen_lattice() {
  return [](std::mt19937& rng, int64_t n, int index) {
    std::uniform_int_distribution<int> u(-10, 9);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng) * 0.2 + 0.05 + 0.1 * index;
    return v;
  };
}

GenFn gen_distinct() {
  return [](std::mt19937& rng, int64_t n, int) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i - n / 2) * 0.1 + 0.03;
    std::shuffle(v.begin(), v.end(), rng);
    return v;
  };
}

GenFn gen_each(std::vector<GenFn> per_input) {
  return [g = std::move(per_input)](std::mt19937& rng, int64_t n, int index) {
    return g[size_t(index)](rng, n, index);
  };
}

// ---- shapes ---------------------------------------------------------------------------------

Shape random_shape(std::mt19937& rng, int rank, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> u(lo, hi);
  std::vector<int64_t> d(static_cast<size_t>(rank));
  for (int64_t& x : d) x = u(rng);
  return Shape(d);
}

namespace {
int rand_int(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// A pair broadcasting to a random full shape: each dim is 1 on one side at random, and the
// second operand may drop leading dims.
ShapeSet random_broadcast_pair(std::mt19937& rng) {
  int rank = rand_int(rng, 1, 4);
  Shape full = random_shape(rng, rank, 2, 4);
  std::vector<int64_t> a = full.vec(), b = full.vec();
  for (int i = 0; i < rank; ++i) {
    int r = rand_int(rng, 0, 2);
    if (r == 0) a[size_t(i)] = 1;
    if (r == 1) b[size_t(i)] = 1;
  }
  int drop = rand_int(rng, 0, rank - 1);
  b.erase(b.begin(), b.begin() + drop);
  if (rng() & 1) std::swap(a, b);
  return {Shape(a), Shape(b)};
}
}  // namespace

std::vector<ShapeSet> unary_shapes(std::mt19937& rng) {
  return {
      {random_shape(rng, rand_int(rng, 1, 2), 1, 6)},
      {random_shape(rng, rand_int(rng, 3, 4), 1, 3)},
      {Shape{}},
      {Shape{0}},
      {Shape{3, 0, 2}},
      {Shape{1, 1, rand_int(rng, 2, 5)}},
      {Shape{1}},
      {Shape{3, 12289}},  // > kParallelGrain elements: the thread-pool path
  };
}

std::vector<ShapeSet> binary_shapes(std::mt19937& rng) {
  Shape same = random_shape(rng, rand_int(rng, 1, 3), 1, 5);
  return {
      {same, same},
      random_broadcast_pair(rng),
      random_broadcast_pair(rng),
      random_broadcast_pair(rng),
      {Shape{4, 1, 3}, Shape{2, 1}},  // both sides broadcast: (4, 2, 3)
      {Shape{}, random_shape(rng, 2, 1, 4)},
      {random_shape(rng, 1, 2, 5), Shape{}},
      {Shape{0, 3}, Shape{3}},
      {Shape{2, 0, 3}, Shape{1, 3}},
      {Shape{2, 1}, Shape{2, 0}},
      {Shape{1}, Shape{1}},
      {Shape{1, 1}, Shape{3, 1}},
      {Shape{300, 257}, Shape{257}},  // large: parallel broadcasting walk
      {Shape{40000}, Shape{40000}},   // large: parallel flat loop
  };
}

std::vector<ShapeSet> into_shapes(std::mt19937& rng) {
  Shape s = random_shape(rng, 3, 2, 4);
  return {
      {s, s},
      {s, Shape{s[1], s[2]}},
      {s, Shape{s[0], 1, s[2]}},
      {s, Shape{}},
      {Shape{5}, Shape{1}},
      {Shape{0, 3}, Shape{3}},
      {Shape{}, Shape{}},
      {Shape{200, 200}, Shape{200}},
  };
}

// ---- checks ---------------------------------------------------------------------------------

namespace {

uint32_t fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

std::string shapes_str(const ShapeSet& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + s[i].str();
  return "[" + r + "]";
}

bool close(double got, double want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= t.atol + t.rtol * std::abs(want);
}

// Rounds generated values to what the dtype can hold, so the reference sees the same inputs.
void round_to(std::vector<double>& v, DType dt) {
  for (double& x : v) {
    if (dt == DType::float32) x = double(float(x));
    else if (!is_floating(dt)) x = std::round(x);
  }
}

// Compares values; reports at most a few mismatching elements.
void expect_values(const std::vector<double>& got, const std::vector<double>& want, Tol t,
                   const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int shown = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (close(got[i], want[i], t)) continue;
    ++bad;
    if (shown++ < 4)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

struct Inputs {
  std::vector<Array> arrays;
  std::vector<Tensor> tensors;
};

// With `as_view`, each input is a view at a nonzero offset into a larger buffer whose other
// elements are junk, so an op that ignores the offset reads the junk.
Inputs make_inputs(const OpCase& c, const ShapeSet& shapes, DType dt, std::mt19937& rng,
                   Device device, bool as_view = false) {
  constexpr int64_t kPad = 3;
  Inputs in;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = shapes[i].numel();
    std::vector<double> v = c.gen(rng, n, int(i));
    round_to(v, dt);
    if (as_view) {
      std::vector<double> buf(size_t(n + 2 * kPad), 12345.0);
      std::copy(v.begin(), v.end(), buf.begin() + kPad);
      Tensor base = from_data(buf, Shape{n + 2 * kPad}, dt, device);
      in.tensors.push_back(base.slice(kPad, kPad + n).reshape(shapes[i].vec()));
    } else {
      in.tensors.push_back(from_data(v, shapes[i], dt, device));
    }
    in.arrays.push_back({shapes[i], std::move(v)});
  }
  return in;
}

void check_values(const OpCase& c, std::mt19937& rng, Device device) {
  std::vector<ShapeSet> sets = c.shapes(rng);
  ASSERT_FALSE(sets.empty()) << c.label << ": no shapes to check";
  const bool view = op_traits(c.op).kind == OpKind::view;
  for (size_t si = 0; si < sets.size(); ++si) {
    for (DType dt : c.dtypes) {
      SCOPED_TRACE(c.label + " values, inputs " + shapes_str(sets[si]) + " " +
                   std::string(name(dt)));
      // Alternate: inputs that are views at an offset, dropped before the output is read
      // (the engine must keep them alive); or plain inputs, checked afterwards to be
      // unchanged and not aliased by the output.
      bool drop = si % 2 == 0;
      Inputs in = make_inputs(c, sets[si], dt, rng, device, drop);
      Array want = c.ref(in.arrays);
      Tensor y = c.build(in.tensors);
      if (drop) in.tensors.clear();
      DType odt = c.out_dtype ? c.out_dtype(dt) : dt;
      ASSERT_TRUE(y.defined());
      EXPECT_EQ(y.device(), device);
      EXPECT_EQ(y.shape(), want.shape);
      EXPECT_EQ(y.dtype(), odt);
      if (y.shape() != want.shape) continue;
      Tol t = !is_floating(odt)                                 ? Tol{0, 0}
              : (dt == DType::float32 || odt == DType::float32) ? c.tol32
                                                                : c.tol64;
      expect_values(y.to_vector<double>(), want.v, t, "output");
      if (drop) continue;
      for (size_t i = 0; i < in.tensors.size(); ++i) {
        expect_values(in.tensors[i].to_vector<double>(), in.arrays[i].v, Tol{0, 0},
                      "input left unchanged");
        // Views share their input's storage; every other op writes a fresh one.
        if (view) {
          EXPECT_EQ(y.storage(), in.tensors[i].storage()) << "a view copies";
        } else {
          EXPECT_NE(y.storage(), in.tensors[i].storage()) << "the output aliases input " << i;
        }
      }
    }
  }
}

double weighted_sum(const Tensor& y, const std::vector<double>& w) {
  std::vector<double> v = y.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

void check_grad(const OpCase& c, std::mt19937& rng, Device device) {
  const std::string node = c.node_name.empty() ? std::string(op_name(c.op)) : c.node_name;
  int checked = 0;  // shape sets within grad_max_numel
  for (const ShapeSet& shapes : c.shapes(rng)) {
    int64_t total = 0;
    for (const Shape& s : shapes) total += s.numel();
    if (total > c.grad_max_numel) continue;
    ++checked;
    SCOPED_TRACE(c.label + " gradient, inputs " + shapes_str(shapes));
    Inputs in = make_inputs(c, shapes, DType::float64, rng, device);
    for (Tensor& t : in.tensors) t.requires_grad_();
    Tensor y = c.build(in.tensors);
    ASSERT_TRUE(y.requires_grad()) << "the output records no gradient";
    ASSERT_NE(y.impl().grad_fn, nullptr);
    EXPECT_EQ(std::string(y.impl().grad_fn->op), node) << "the case builds another op";
    std::vector<double> w = gen_uniform(-1.0, 1.0)(rng, y.numel(), 0);
    round_to(w, y.dtype());  // the host sum below uses the weights backward() used
    sum(mul(y, from_data(w, y.shape(), y.dtype(), device))).backward();

    for (size_t i = 0; i < shapes.size(); ++i) {
      SCOPED_TRACE("input " + std::to_string(i));
      Tensor g = in.tensors[i].grad();
      ASSERT_TRUE(g.defined()) << "no gradient reached the input";
      EXPECT_EQ(g.shape(), shapes[i]);
      EXPECT_EQ(g.dtype(), DType::float64);
      EXPECT_EQ(g.device(), device);
      if (g.shape() != shapes[i]) continue;
      std::vector<double> analytic = g.to_vector<double>();
      std::vector<double> numeric(analytic.size());
      NoGrad no_grad;
      // Queue every perturbed evaluation first, then read them: one sync per input, not two
      // per element.
      auto eval = [&](size_t j, double delta) {
        std::vector<Tensor> xs;
        for (size_t k = 0; k < shapes.size(); ++k) {
          std::vector<double> v = in.arrays[k].v;
          if (k == i) v[j] += delta;
          xs.push_back(from_data(v, shapes[k], DType::float64, device));
        }
        return c.build(xs);
      };
      std::vector<std::pair<Tensor, Tensor>> evals;
      for (size_t j = 0; j < numeric.size(); ++j)
        evals.emplace_back(eval(j, c.grad_eps), eval(j, -c.grad_eps));
      for (size_t j = 0; j < numeric.size(); ++j)
        numeric[j] =
            (weighted_sum(evals[j].first, w) - weighted_sum(evals[j].second, w)) / (2 * c.grad_eps);
      expect_values(analytic, numeric, c.grad_tol, "gradient (analytic vs numeric)");
    }
  }
  // A gradient test that checked nothing must not count as one.
  EXPECT_GT(checked, 0) << c.label << ": every shape set is above grad_max_numel";
}

}  // namespace

void run_case(const OpCase& c) {
  std::vector<Device> devices{Device::cpu()};
  for (Device d : case_devices())
    if (op_supported(d, c.op)) devices.push_back(d);
  for (Device d : devices) {
    // The same seed on every device: the same inputs.
    std::mt19937 rng(fnv1a(c.label));
    SCOPED_TRACE("case " + c.label + " (op " + op_name(c.op) + " on " + d.str() + ", seed " +
                 std::to_string(fnv1a(c.label)) + ")");
    check_values(c, rng, d);
    if (c.grad) check_grad(c, rng, d);
  }
}

void run_cases(const std::vector<OpCase>& cases, const char* label) {
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    OpCase c = cases[i];
    if (c.label.empty()) c.label = std::string(label) + "#" + std::to_string(i);
    run_case(c);
  }
}

// ---- coverage -------------------------------------------------------------------------------

namespace {
std::vector<CoverageEntry>& registry() {
  static std::vector<CoverageEntry> r;
  return r;
}
}  // namespace

const std::vector<CoverageEntry>& coverage() { return registry(); }

bool register_coverage(const char* test, std::initializer_list<Coverage> items) {
  for (const Coverage& c : items) registry().push_back({c.op, c.check, test});
  return true;
}

bool register_cases(const char* test, const std::vector<OpCase>& cases) {
  for (const OpCase& c : cases) {
    registry().push_back({c.op, Check::value, test});
    if (c.grad) registry().push_back({c.op, Check::grad, test});
  }
  return true;
}

std::vector<std::string> coverage_gaps(std::span<const OpTraits> table,
                                       const std::vector<CoverageEntry>& entries) {
  std::vector<std::string> gaps;
  auto has = [&](OpId op, Check k) {
    return std::any_of(entries.begin(), entries.end(),
                       [&](const CoverageEntry& e) { return e.op == op && e.check == k; });
  };
  for (const OpTraits& t : table) {
    if (!has(t.id, Check::value)) gaps.push_back(std::string(t.name) + ": no value test");
    if (t.differentiable && !has(t.id, Check::grad))
      gaps.push_back(std::string(t.name) + ": no gradient test");
  }
  return gaps;
}

}  // namespace tide::test
