// Creation ops (zeros, ones, full, arange, from_data/from_vector, clone, cast, rand, randn)
// and the views (reshape, slice, operator[]): values, shared storage, gradients, errors,
// and the random streams' reproducibility (seed, offset, thread count).
// Not here: Philox itself against published vectors (tests/core), the allocator.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

#include "core/philox.h"
#include "core/thread_pool.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Array;
using test::Check;
using test::OpCase;
using test::ShapeSet;
using V = std::vector<Tensor>;

const DType kAllTypes[] = {DType::float32, DType::float64, DType::int32, DType::int64};

// A float converted to an integer dtype by tide's rule (ops/creation.h, cast): NaN -> 0,
// values beyond the range (infinities included) -> the max or min, else truncated.
double saturated(double a, DType to) {
  const double lim = to == DType::int32 ? 0x1p31 : 0x1p63;
  if (std::isnan(a)) return 0;
  if (a >= lim) return to == DType::int32 ? lim - 1 : lim;  // 2^63 - 1 reads back as 2^63
  if (a <= -lim) return -lim;
  return std::trunc(a);
}

// Values a float-to-integer cast must define: NaN, infinities, the edges of int32 and int64
// and beyond, fractions near zero; then ordinary values.
test::GenFn gen_special_floats() {
  return [](std::mt19937& rng, int64_t n, int) {
    const double special[] = {NAN,   INFINITY, -INFINITY,    1e30,         -1e30,
                              3e9,   -3e9,     0x1p31,       -0x1p31,      0x1p31 - 128,
                              1e19,  -1e19,    0x1p63,       -0x1p63,      0.75,
                              -0.75, -0.0,     2147483647.5, -2147483648.5};
    std::uniform_real_distribution<double> u(-1e6, 1e6);
    std::vector<double> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = i < std::size(special) ? special[i] : u(rng);
    return v;
  };
}

// ---- fills -----------------------------------------------------------------------------------

TIDE_OP_TEST(Creation, ConstantFills, {OpId::zeros, Check::value}, {OpId::ones, Check::value},
             {OpId::full, Check::value}) {
  std::mt19937 rng(11);
  for (DType dt : kAllTypes) {
    for (Shape s : {test::random_shape(rng, 3, 1, 5), Shape{}, Shape{0, 4}, Shape{50000}}) {
      SCOPED_TRACE(s.str() + " " + std::string(name(dt)));
      // Fill a cached block with junk first so that an op that writes nothing shows.
      full(s, 9.0, dt).wait_to_read();
      Tensor z = zeros(s, dt), o = ones(s, dt), f = full(s, -3.0, dt);
      for (const Tensor& t : {z, o, f}) {
        EXPECT_EQ(t.shape(), s);
        EXPECT_EQ(t.dtype(), dt);
      }
      size_t n = size_t(s.numel());
      EXPECT_EQ(z.to_vector<double>(), std::vector<double>(n, 0.0));
      EXPECT_EQ(o.to_vector<double>(), std::vector<double>(n, 1.0));
      EXPECT_EQ(f.to_vector<double>(), std::vector<double>(n, -3.0));
    }
  }
  EXPECT_EQ(full({2}, 2.5, DType::float64).to_vector<double>(), std::vector<double>(2, 2.5));
  EXPECT_EQ(full({2}, 2.75, DType::int32).to_vector<int32_t>(), std::vector<int32_t>(2, 2));
  EXPECT_TIDE_ERROR(zeros({2, -1}), "[shape]", "-1");
}

TIDE_OP_TEST(Creation, Arange, {OpId::arange, Check::value}) {
  auto vec = [](Tensor t) { return t.to_vector<double>(); };
  EXPECT_EQ(vec(arange(5)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), DType::int64);
  EXPECT_EQ(vec(arange(2.0, 3.0, 0.25, DType::float64)), (std::vector<double>{2, 2.25, 2.5, 2.75}));
  EXPECT_EQ(vec(arange(5.0, 0.0, -1.0)), (std::vector<double>{5, 4, 3, 2, 1}));
  EXPECT_EQ(vec(arange(1.0, -1.0, -0.5, DType::float64)), (std::vector<double>{1, 0.5, 0, -0.5}));
  EXPECT_EQ(vec(arange(0.0, 7.0, 3.0, DType::int32)), (std::vector<double>{0, 3, 6}));
  EXPECT_EQ(arange(0.0, 1.0, 0.1, DType::float64).numel(), 10);  // end excluded
  // Empty ranges.
  EXPECT_EQ(arange(3.0, 3.0).shape(), (Shape{0}));
  EXPECT_EQ(arange(5.0, 0.0, 1.0).shape(), (Shape{0}));
  EXPECT_EQ(arange(0.0, 5.0, -1.0).shape(), (Shape{0}));
  EXPECT_EQ(arange(0).numel(), 0);
  // Large: the parallel fill.
  std::vector<double> big = vec(arange(0.0, 100000.0, 1.0, DType::float64));
  ASSERT_EQ(big.size(), 100000u);
  for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(big[i], double(i));
  EXPECT_TIDE_ERROR(arange(0.0, 5.0, 0.0), "[arange]", "step");
  EXPECT_TIDE_ERROR(arange(0.0, INFINITY, 1.0), "[arange]");
}

// Issue 11 item 14: the element count (end - start) / step was converted to int64 whatever
// its size: arange(0, 1e300, 1e-300) asked for int64(1e600), undefined behaviour that gave
// garbage or negative extents. The count must be finite and at most 2^60 (core/shape.h).
TEST(CreationErrors, ArangeCountMustBeFiniteAndWithinTheShapeLimit) {
  const uint64_t queued = Engine::get().stats().queued;
  EXPECT_TIDE_ERROR(arange(0.0, 1e300, 1e-300), "[arange]", "(0, 1e+300, 1e-300)", "inf elements",
                    "2^60");
  EXPECT_TIDE_ERROR(arange(0.0, 1e300, 1e-300, DType::float64), "[arange]", "elements");
  EXPECT_TIDE_ERROR(arange(-1e308, 1e308, 1.0), "[arange]", "inf elements");  // end - start
  EXPECT_TIDE_ERROR(arange(1e308, -1e308, -1e-10), "[arange]", "elements");
  EXPECT_TIDE_ERROR(arange(0.0, 1e19, 1.0), "[arange]", "1e+19 elements");  // past int64
  EXPECT_TIDE_ERROR(arange(0.0, 0x1p60 + 0x1p50, 1.0), "[arange]", "2^60");
  EXPECT_TIDE_ERROR(arange(0.0, 1.0, 1e-300), "[arange]", "elements");
  EXPECT_TIDE_ERROR(arange(0.0, 1.0, NAN), "[arange]", "step");
  EXPECT_TIDE_ERROR(arange(NAN, 1.0, 1.0), "[arange]");
  EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing is queued";
  // A negative count is an empty range (NumPy's rule), as before.
  EXPECT_EQ(arange(1e300, 0.0, 1e-300).shape(), (Shape{0}));
  EXPECT_EQ(arange(0.0, -1e19, 1.0).shape(), (Shape{0}));
}

// An integer range whose values leave the dtype is refused (its last value was converted
// with undefined behaviour); at the range's edges it is exact.
TEST(CreationErrors, ArangeValuesMustFitAnIntegerDtype) {
  EXPECT_TIDE_ERROR(arange(0.0, 4e9, 1e9, DType::int32), "[arange]", "3e+09",
                    "outside the range of int32");
  EXPECT_TIDE_ERROR(arange(-3e9, 0.0, 1e9, DType::int32), "[arange]", "-3e+09", "int32");
  EXPECT_TIDE_ERROR(arange(2147483647.0, 2147483649.0, 1.0, DType::int32), "[arange]",
                    "2147483648");
  EXPECT_TIDE_ERROR(arange(0.0, 1e19, 5e17, DType::int64), "[arange]", "9.5e+18", "int64");
  EXPECT_EQ(arange(2147483645.0, 2147483648.0, 1.0, DType::int32).to_vector<int32_t>(),
            (std::vector<int32_t>{2147483645, 2147483646, 2147483647}));
  EXPECT_EQ(arange(-2147483648.0, -2147483646.0, 1.0, DType::int32).to_vector<int32_t>(),
            (std::vector<int32_t>{-2147483647 - 1, -2147483647}));
  EXPECT_EQ(arange(0.0, 4e9, 1e9, DType::int64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1000000000, 2000000000, 3000000000}));
  // Float dtypes hold any finite value (float32 rounds).
  EXPECT_EQ(arange(0.0, 4e9, 1e9).to_vector<float>(), (std::vector<float>{0, 1e9f, 2e9f, 3e9f}));
}

// full() into an integer dtype: a value the dtype cannot hold is refused; a fractional one
// truncates toward zero, as cast does.
TEST(CreationErrors, FullValueMustFitAnIntegerDtype) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TIDE_ERROR(full({2}, 1e30, DType::int32), "[full]", "1e+30", "outside the range of int32");
  EXPECT_TIDE_ERROR(full({2}, 2147483648.0, DType::int32), "[full]", "2147483648");
  EXPECT_TIDE_ERROR(full({2}, 9223372036854775808.0, DType::int64), "[full]", "int64");
  EXPECT_TIDE_ERROR(full({2}, nan, DType::int64), "[full]", "nan", "not finite");
  EXPECT_TIDE_ERROR(full({2}, -inf, DType::int32), "[full]", "-inf");
  EXPECT_EQ(full({2}, -2147483648.0, DType::int32).to_vector<int32_t>(),
            std::vector<int32_t>(2, -2147483647 - 1));
  EXPECT_EQ(full({1}, -9223372036854775808.0, DType::int64).to_vector<int64_t>(),
            std::vector<int64_t>(1, std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(full({2}, -2.75, DType::int64).to_vector<int64_t>(), std::vector<int64_t>(2, -2));
  EXPECT_TRUE(std::isnan(full({1}, nan).item<float>()));  // floating dtypes take anything
}

TIDE_OP_TEST(Creation, FromData, {OpId::from_data, Check::value}) {
  std::vector<double> v{1.5, -2, 3, 4.25, 0, 6};
  for (DType dt : kAllTypes) {
    Tensor t = from_data(v, Shape{2, 3}, dt);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    std::vector<double> got = t.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_EQ(got[i], is_floating(dt) ? v[i] : double(int64_t(v[i]))) << name(dt);
  }
  // The caller's buffer is copied at the call.
  std::vector<float> buf{1, 2, 3};
  Tensor f = from_vector(buf, Shape{3});
  buf.assign(3, 0.0f);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(from_vector<int64_t>({1, 2}, Shape{2}).dtype(), DType::int64);
  EXPECT_EQ(from_vector<int32_t>({7}, Shape{}).item<int32_t>(), 7);
  EXPECT_EQ(from_vector<double>({}, Shape{0, 2}).numel(), 0);
  EXPECT_TIDE_ERROR(from_data({1, 2, 3}, Shape{2, 2}), "[from_data]", "3", "(2, 2)");
  EXPECT_TIDE_ERROR(from_vector<float>({1, 2}, Shape{3}), "[from_data]", "2", "(3,)");
  EXPECT_TIDE_ERROR(from_vector<int32_t>({}, Shape{1}), "[from_data]", "(1,)");
}

// ---- clone and cast --------------------------------------------------------------------------

TIDE_OP_CASES(Creation, Clone) {
  OpCase c{.op = OpId::clone,
           .build = [](const V& x) { return clone(x[0]); },
           .ref = test::ref_unary([](double a) { return a; }),
           .grad = true};
  OpCase ints = c;
  ints.dtypes = {DType::int32, DType::int64};
  ints.gen = test::gen_ints(-1000, 1000);
  ints.grad = false;
  // A clone of a view copies the view's elements, not the base's first ones.
  OpCase view = c;
  view.build = [](const V& x) { return clone(x[0].reshape({-1}).slice(1, x[0].numel())); };
  view.ref = [](const std::vector<Array>& in) {
    return Array{Shape{in[0].shape.numel() - 1}, {in[0].v.begin() + 1, in[0].v.end()}};
  };
  view.shapes = [](std::mt19937& rng) {
    return std::vector<ShapeSet>{{test::random_shape(rng, 2, 2, 6)}, {Shape{1}}};
  };
  view.node_name = "clone";
  return {c, ints, view};
}

TEST(Creation, CloneHasIndependentStorage) {
  Tensor a = from_data({1, 2, 3}, Shape{3});
  Tensor b = clone(a);
  EXPECT_NE(a.storage(), b.storage());
  b.add_(ones({3}));
  a.mul_(10.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{2, 3, 4}));
}

TIDE_OP_CASES(Creation, Cast) {
  auto other = [](DType t) {
    switch (t) {
      case DType::float32: return DType::float64;
      case DType::float64: return DType::float32;
      case DType::int32: return DType::int64;
      case DType::int64: return DType::float32;
      case DType::bfloat16:
      case DType::float16: return DType::float32;
    }
    return t;
  };
  std::vector<OpCase> v;
  for (DType to : {DType::float32, DType::float64}) {
    OpCase c{.op = OpId::cast,
             .build = [to](const V& x) { return cast(x[0], to); },
             .ref = test::ref_unary([](double a) { return a; }),
             .out_dtype = [to](DType) { return to; },
             .grad = true,
             // Linear, so a large step is exact; it must be large when the output is
             // float32 (the rounding of the output would swamp a 1e-6 step).
             .grad_eps = 0.01,
             .grad_tol = {1e-5, 1e-4}};
    v.push_back(c);
  }
  // The gradient check runs on float64 inputs, and float64 -> float64 is a clone: check the
  // gradient of float64 -> float32 only.
  v[1].grad = false;
  // Integer conversions: to float, to the other width, and floats truncating to int.
  OpCase ints{.op = OpId::cast,
              .build = [other](const V& x) { return cast(x[0], other(x[0].dtype())); },
              .ref = test::ref_unary([](double a) { return a; }),
              .gen = test::gen_ints(-100000, 100000),
              .dtypes = {DType::int32, DType::int64},
              .out_dtype = other};
  OpCase trunc{.op = OpId::cast,
               .build = [](const V& x) { return cast(x[0], DType::int32); },
               .ref = test::ref_unary([](double a) { return std::trunc(a); }),
               .gen = test::gen_uniform(-50, 50),
               .out_dtype = [](DType) { return DType::int32; }};
  v.push_back(ints);
  v.push_back(trunc);
  // Issue 11 item 14: floats to integers saturate (NaN -> 0, beyond the range and +-inf ->
  // the max / min), in the shared functor, so the CPU and every GPU give these values.
  for (DType to : {DType::int32, DType::int64})
    v.push_back(OpCase{.op = OpId::cast,
                       .build = [to](const V& x) { return cast(x[0], to); },
                       .ref = test::ref_unary([to](double a) { return saturated(a, to); }),
                       .gen = gen_special_floats(),
                       .out_dtype = [to](DType) { return to; }});
  return v;
}

// The cases above at the exact edges, compared as integers (a double cannot tell
// 2^63 - 1 from 2^63), on the CPU and the case devices.
TEST(Creation, CastFromFloatSaturates) {
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  const float finf = std::numeric_limits<float>::infinity();
  const int32_t imax = std::numeric_limits<int32_t>::max();
  const int32_t imin = std::numeric_limits<int32_t>::min();
  const int64_t lmax = std::numeric_limits<int64_t>::max();
  const int64_t lmin = std::numeric_limits<int64_t>::min();
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices) {
    SCOPED_TRACE(d.str());
    Tensor f = from_vector<float>({fnan, finf, -finf, 1e30f, -1e30f, 2147483648.0f, -2147483648.0f,
                                   2147483520.0f, -2.9f, 2.9f, -0.0f},
                                  Shape{11}, d);
    EXPECT_EQ(cast(f, DType::int32).to_vector<int32_t>(),
              (std::vector<int32_t>{0, imax, imin, imax, imin, imax, imin, 2147483520, -2, 2, 0}));
    EXPECT_EQ(cast(f, DType::int64).to_vector<int64_t>(),
              (std::vector<int64_t>{0, lmax, lmin, lmax, lmin, 2147483648, -2147483648, 2147483520,
                                    -2, 2, 0}));
    Tensor g = from_vector<double>({NAN, INFINITY, -INFINITY, 0x1p63, -0x1p63, 0x1p63 - 1024, 1e300,
                                    2147483647.9, -2147483648.9},
                                   Shape{9}, d);
    EXPECT_EQ(cast(g, DType::int64).to_vector<int64_t>(),
              (std::vector<int64_t>{0, lmax, lmin, lmax, lmin, 9223372036854774784, lmax,
                                    2147483647, -2147483648}));
    EXPECT_EQ(cast(g, DType::int32).to_vector<int32_t>(),
              (std::vector<int32_t>{0, imax, imin, imax, imin, imax, imax, imax, imin}));
  }
  // from_data converts its doubles by the same rule.
  EXPECT_EQ(from_data({NAN, 1e30, -1e30, 2.5, -2.5}, Shape{5}, DType::int32).to_vector<int32_t>(),
            (std::vector<int32_t>{0, imax, imin, 2, -2}));
  EXPECT_EQ(from_data({INFINITY, -1e19}, Shape{2}, DType::int64).to_vector<int64_t>(),
            (std::vector<int64_t>{lmax, lmin}));
}

TEST(Creation, CastBetweenFloatsIsDifferentiableIntegerCastIsNot) {
  Tensor x = from_data({1.5, -2.5}, Shape{2}, DType::float64).requires_grad_();
  Tensor y = cast(x, DType::float32);
  EXPECT_TRUE(y.requires_grad());
  sum(y * 2.0).backward();
  EXPECT_EQ(x.grad().dtype(), DType::float64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_FALSE(cast(x, DType::int64).requires_grad());
  EXPECT_EQ(cast(x, DType::int64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2}));
}

// ---- random ---------------------------------------------------------------------------------

TIDE_OP_TEST(Random, RandIsUniformInUnitInterval, {OpId::rand, Check::value}) {
  for (DType dt : {DType::float32, DType::float64}) {
    Generator gen(1234);
    Tensor u = rand({100000}, dt, gen);
    EXPECT_EQ(u.dtype(), dt);
    std::vector<double> v = u.to_vector<double>();
    double s = 0, lo = 1, hi = 0;
    int64_t bins[10] = {};
    for (double x : v) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
      s += x, lo = std::min(lo, x), hi = std::max(hi, x);
      ++bins[int(x * 10)];
    }
    // Mean of 1e5 uniforms: sd 0.29 / 316 = 9e-4; 0.005 is > 5 sd.
    EXPECT_NEAR(s / double(v.size()), 0.5, 0.005) << name(dt);
    EXPECT_LT(lo, 1e-3);
    EXPECT_GT(hi, 1 - 1e-3);
    for (int64_t b : bins) EXPECT_NEAR(double(b), 10000.0, 600.0);  // ~6 sd
  }
  EXPECT_TIDE_ERROR(rand({3}, DType::int32), "[rand]", "int32");
}

TIDE_OP_TEST(Random, RandnIsStandardNormal, {OpId::randn, Check::value}) {
  for (DType dt : {DType::float32, DType::float64}) {
    Generator gen(99);
    std::vector<double> v = randn({100000}, dt, gen).to_vector<double>();
    double s = 0, s2 = 0, s3 = 0;
    int64_t within1 = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      s += x, s2 += x * x, s3 += x * x * x;
      within1 += std::abs(x) < 1.0;
    }
    double n = double(v.size()), mean = s / n, var = s2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.02) << name(dt);            // sd 3.2e-3
    EXPECT_NEAR(std::sqrt(var), 1.0, 0.02) << name(dt);  // sd 2.2e-3
    EXPECT_NEAR(s3 / n, 0.0, 0.05) << name(dt);          // skewness, sd 7.7e-3
    EXPECT_NEAR(double(within1) / n, 0.6827, 0.01) << name(dt);
  }
  EXPECT_TIDE_ERROR(randn({3}, DType::int64), "[randn]", "int64");
}

TEST(Random, SameSeedSameNumbersOffsetsDiffer) {
  Generator g1(5), g2(5);
  std::vector<float> a = randn({1000}, DType::float32, g1).to_vector<float>();
  std::vector<float> b = randn({1000}, DType::float32, g2).to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_EQ(g1.offset(), g2.offset());
  EXPECT_GT(g1.offset(), 0u);
  // The next draw continues the stream: different numbers.
  std::vector<float> c = randn({1000}, DType::float32, g1).to_vector<float>();
  EXPECT_NE(a, c);
  // Another offset on the same seed: different numbers; back to the same offset: the same.
  Generator g3(5);
  g3.set_offset(12345);
  std::vector<float> d = randn({1000}, DType::float32, g3).to_vector<float>();
  EXPECT_NE(a, d);
  g3.set_offset(0);
  EXPECT_EQ(randn({1000}, DType::float32, g3).to_vector<float>(), a);
  // Another seed: different numbers.
  Generator g4(6);
  EXPECT_NE(randn({1000}, DType::float32, g4).to_vector<float>(), a);
  // Consecutive draws do not overlap: the second draw of 1000 is not a shifted first.
  int shared = 0;
  for (float x : c) shared += std::count(a.begin(), a.end(), x) > 0;
  EXPECT_LT(shared, 5);
  // rand and the default generator obey manual_seed.
  manual_seed(77);
  std::vector<double> r1 = rand({64}, DType::float64).to_vector<double>();
  manual_seed(77);
  EXPECT_EQ(rand({64}, DType::float64).to_vector<double>(), r1);
}

TEST(Random, CountersAreReservedPerOp) {
  // Element i of a draw uses counter offset + i / 4: a draw at offset 1 is the tail of a
  // draw at offset 0, and each op advances the offset by ceil(numel / 4).
  Generator g(3);
  std::vector<double> first = rand({8}, DType::float64, g).to_vector<double>();
  EXPECT_EQ(g.offset(), 2u);
  rand({3}, DType::float64, g);
  EXPECT_EQ(g.offset(), 3u);
  Generator h(3);
  h.set_offset(1);
  EXPECT_EQ(rand({4}, DType::float64, h).to_vector<double>(),
            std::vector<double>(first.begin() + 4, first.end()));
}

TEST(Random, IndependentOfThreadCount) {
  int saved = num_threads();
  auto draw = [](int threads) {
    set_num_threads(threads);
    Generator g(2024);
    return std::pair{randn({200000}, DType::float32, g).to_vector<float>(),
                     rand({200000}, DType::float64, g).to_vector<double>()};
  };
  auto one = draw(1);
  auto two = draw(2);
  set_num_threads(saved);
  EXPECT_EQ(num_threads(), saved);
  EXPECT_TRUE(one.first == two.first) << "randn differs between 1 and 2 threads";
  EXPECT_TRUE(one.second == two.second) << "rand differs between 1 and 2 threads";
}

// Philox 4x32-10 at counter 0, key 0: the known answer of Random123's kat_vectors; the
// lane form (what the CPU kernel runs) gives the same words as block() at any start.
TEST(Random, PhiloxKnownAnswerAndLanes) {
  philox::U32x4 z = philox::block(0, 0);
  EXPECT_EQ(z.v[0], 0x6627e8d5u);
  EXPECT_EQ(z.v[1], 0xe169c58du);
  EXPECT_EQ(z.v[2], 0xbc57ac4cu);
  EXPECT_EQ(z.v[3], 0x9b00dbd8u);
  for (uint64_t first : {uint64_t(0), uint64_t(0xFFFFFFF8u), ~uint64_t(0) - 5}) {
    uint32_t c[4][16];
    philox::blocks<16>(first, 0x0123456789ABCDEFull, c);
    for (int l = 0; l < 16; ++l) {
      philox::U32x4 b = philox::block(first + uint64_t(l), 0x0123456789ABCDEFull);
      for (int j = 0; j < 4; ++j) ASSERT_EQ(c[j][l], b.v[j]) << first << " lane " << l;
    }
  }
}

// The Box-Muller transform (core/philox.h: polynomial log, sin and cos, no libm) against
// long double libm on u = (x1 + 1/2) / 2^32 and th = 2 pi x2 / 2^32: the error of each
// output, in ulps of the radius r = sqrt(-2 log u) (cos or sin may be near 0), is at most
// 4 in float and in double (measured: 2.8 and 2.1). Random words, then those at the edges
// of the log's and the angle's reductions.
TEST(Random, NormalTransformMatchesLibm) {
  double worst_f = 0, worst_d = 0;
  auto check = [&](uint32_t x1, uint32_t x2) {
    const long double u = ((long double)x1 + 0.5L) * 0x1p-32L;
    const long double r = std::sqrt(-2 * std::log(u));
    const long double th = 6.283185307179586476925286766559L * (long double)x2 * 0x1p-32L;
    const long double c = r * std::cos(th), s = r * std::sin(th);
    float f0, f1;
    double d0, d1;
    philox::box_muller(x1, x2, f0, f1);
    philox::box_muller(x1, x2, d0, d1);
    const double ulp_f = std::nextafter(float(r), INFINITY) - float(r);
    const double ulp_d = std::nextafter(double(r), INFINITY) - double(r);
    const double ef = double(std::max(std::abs(f0 - c), std::abs(f1 - s))) / ulp_f;
    const double ed = double(std::max(std::abs(d0 - c), std::abs(d1 - s))) / ulp_d;
    worst_f = std::max(worst_f, ef);
    worst_d = std::max(worst_d, ed);
    if (ef > 4 || ed > 4)
      ADD_FAILURE() << std::hex << "x1 " << x1 << " x2 " << x2 << std::dec << ": float " << ef
                    << " ulps, double " << ed << " ulps";
  };
  std::mt19937 rng(41);
  for (int i = 0; i < 1000000; ++i) check(rng(), rng());
  const uint32_t edges1[] = {0u,          1u,          2u,          0x00FFFFFFu, 0x01000000u,
                             0x3504F333u, 0x7FFFFFFFu, 0x80000000u, 0xB504F333u, 0xB504F334u,
                             0xFFFFFF00u, 0xFFFFFF7Fu, 0xFFFFFF80u, 0xFFFFFFFEu, 0xFFFFFFFFu};
  const uint32_t edges2[] = {0u,          1u,          0x1FFFFFFFu, 0x20000000u, 0x3FFFFFFFu,
                             0x40000000u, 0x7FFFFFFFu, 0x80000000u, 0xBFFFFFFFu, 0xC0000000u,
                             0xDFFFFFFFu, 0xE0000000u, 0xFFFFFFFFu};
  for (uint32_t a : edges1)
    for (uint32_t b : edges2) check(a, b);
  for (uint32_t k = 0; k < 4096; ++k) check(~k, k * 2654435761u);  // u next to 1: r near 0
  EXPECT_LE(worst_f, 4.0);
  EXPECT_LE(worst_d, 4.0);
}

// 1M samples per dtype: mean, variance, skewness, kurtosis and the 3-sigma tails, each to
// within about 5 standard errors.
TEST(Random, RandnMomentsOfAMillion) {
  for (DType dt : {DType::float32, DType::float64}) {
    Generator gen(1001);
    std::vector<double> v = randn({1000, 1000}, dt, gen).to_vector<double>();
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0, hi = 0;
    int64_t beyond3 = 0;
    for (double x : v) {
      s1 += x, s2 += x * x, s3 += x * x * x, s4 += x * x * x * x;
      beyond3 += std::abs(x) > 3.0;
      hi = std::max(hi, std::abs(x));
    }
    const double n = double(v.size());
    EXPECT_NEAR(s1 / n, 0.0, 0.005) << name(dt);                       // sd 1e-3
    EXPECT_NEAR(s2 / n, 1.0, 0.007) << name(dt);                       // sd 1.4e-3
    EXPECT_NEAR(s3 / n, 0.0, 0.02) << name(dt);                        // sd 2.4e-3
    EXPECT_NEAR(s4 / n, 3.0, 0.05) << name(dt);                        // sd 9.8e-3
    EXPECT_NEAR(double(beyond3) / n, 0.0026998, 0.00026) << name(dt);  // sd 5.2e-5
    EXPECT_GT(hi, 4.0) << name(dt);
    EXPECT_LT(hi, 6.8) << name(dt);  // sqrt(-2 log 2^-33): the largest radius there is
  }
}

// Every element of randn and rand, on the CPU (the vectorised kernel, 1 and 2 threads) and
// on each case device (the fake GPU here: the CPU kernel from a stream; tide_cuda_tests:
// the CUDA kernel), equals the scalar normal_at/uniform_at the header defines: the same
// bits on every device. Odd sizes and an odd offset exercise partial lane groups.
TEST(Random, EveryDeviceGivesTheScalarFormulasBits) {
  const int saved = num_threads();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(65), int64_t(100003)}) {
    Generator g(77);
    g.set_offset(13);
    const uint64_t key = g.seed();
    std::vector<float> nf(static_cast<size_t>(n)), uf(static_cast<size_t>(n));
    std::vector<double> nd(static_cast<size_t>(n)), ud(static_cast<size_t>(n));
    uint64_t off = 13;
    for (int64_t i = 0; i < n; ++i) nf[size_t(i)] = philox::normal_at<float>(off, key, uint64_t(i));
    off += uint64_t(n + 3) / 4;
    for (int64_t i = 0; i < n; ++i)
      nd[size_t(i)] = philox::normal_at<double>(off, key, uint64_t(i));
    off += uint64_t(n + 3) / 4;
    for (int64_t i = 0; i < n; ++i)
      uf[size_t(i)] = philox::uniform_at<float>(off, key, uint64_t(i));
    off += uint64_t(n + 3) / 4;
    for (int64_t i = 0; i < n; ++i)
      ud[size_t(i)] = philox::uniform_at<double>(off, key, uint64_t(i));
    std::vector<Device> devices = test::case_devices();
    devices.insert(devices.begin(), {Device::cpu(), Device::cpu()});
    for (size_t k = 0; k < devices.size(); ++k) {
      const Device d = devices[k];
      set_num_threads(k == 0 ? 1 : saved);
      SCOPED_TRACE("n " + std::to_string(n) + " on " + d.str() + (k == 0 ? ", 1 thread" : ""));
      Generator h(77);
      h.set_offset(13);
      Tensor a = randn({n}, DType::float32, h, d), b = randn({n}, DType::float64, h, d);
      Tensor c = rand({n}, DType::float32, h, d), e = rand({n}, DType::float64, h, d);
      EXPECT_TRUE(a.to_vector<float>() == nf);
      EXPECT_TRUE(b.to_vector<double>() == nd);
      EXPECT_TRUE(c.to_vector<float>() == uf);
      EXPECT_TRUE(e.to_vector<double>() == ud);
    }
  }
  set_num_threads(saved);
}

// ---- views ---------------------------------------------------------------------------------

TIDE_OP_CASES(Views, ReshapeSliceSelect) {
  auto identity_ref = [](Shape to) {
    return [to](const std::vector<Array>& in) { return Array{to, in[0].v}; };
  };
  auto fixed = [](Shape s) { return [s](std::mt19937&) { return std::vector<ShapeSet>{{s}}; }; };
  std::vector<OpCase> v;
  // reshape, with and without -1
  v.push_back({.op = OpId::reshape,
               .build =
                   [](const V& x) {
                     return x[0].reshape({3, -1});
                   },
               .ref = identity_ref(Shape{3, 8}),
               .shapes = fixed(Shape{2, 3, 4}),
               .grad = true});
  v.push_back({.op = OpId::reshape,
               .build = [](const V& x) { return x[0].reshape({-1}); },
               .ref = identity_ref(Shape{0}),
               .shapes = fixed(Shape{4, 0}),
               .grad = true});
  v.push_back({.op = OpId::reshape,
               .build = [](const V& x) { return x[0].reshape({}); },
               .ref = identity_ref(Shape{}),
               .shapes = fixed(Shape{1, 1}),
               .grad = true});
  // slice rows [1, 3) of (4, 2, 3), an empty slice and the full range
  for (auto [b, e] : {std::pair{1, 3}, std::pair{2, 2}, std::pair{0, 4}}) {
    v.push_back(
        {.op = OpId::slice,
         .build = [b = b, e = e](const V& x) { return x[0].slice(b, e); },
         .ref =
             [b = b, e = e](const std::vector<Array>& in) {
               return Array{Shape{e - b, 2, 3}, {in[0].v.begin() + b * 6, in[0].v.begin() + e * 6}};
             },
         .shapes = fixed(Shape{4, 2, 3}),
         .grad = true});
  }
  // select row 2 of (3, 4) and element 1 of (5,)
  v.push_back({.op = OpId::select,
               .build = [](const V& x) { return x[0][2]; },
               .ref =
                   [](const std::vector<Array>& in) {
                     return Array{Shape{4}, {in[0].v.begin() + 8, in[0].v.end()}};
                   },
               .shapes = fixed(Shape{3, 4}),
               .grad = true});
  v.push_back({.op = OpId::select,
               .build = [](const V& x) { return x[0][1]; },
               .ref =
                   [](const std::vector<Array>& in) {
                     return Array{Shape{}, {in[0].v[1]}};
                   },
               .shapes = fixed(Shape{5}),
               .grad = true});
  // A view of a view: the offsets add up.
  v.push_back({.op = OpId::select,
               .build = [](const V& x) { return x[0].slice(1, 3)[1]; },
               .ref =
                   [](const std::vector<Array>& in) {
                     return Array{Shape{2, 3}, {in[0].v.begin() + 12, in[0].v.begin() + 18}};
                   },
               .shapes = fixed(Shape{4, 2, 3}),
               .grad = true});
  return v;
}

TEST(Views, ShareStorageWithTheBase) {
  Tensor base = zeros({4, 3}, DType::float64);
  Tensor flat = base.reshape({-1});
  Tensor rows = base.slice(1, 3);
  Tensor row3 = base[3];
  EXPECT_EQ(flat.storage(), base.storage());
  EXPECT_EQ(rows.storage(), base.storage());
  EXPECT_EQ(row3.storage(), base.storage());
  rows.copy_(full({3}, 5.0, DType::float64));  // rows 1 and 2, broadcast
  row3.add_(arange(0.0, 3.0, 1.0, DType::float64));
  flat[0].copy_(full({}, -1.0, DType::float64));
  EXPECT_EQ(base.to_vector<double>(), (std::vector<double>{-1, 0, 0, 5, 5, 5, 5, 5, 5, 0, 1, 2}));
  // Writes through the base show in the views.
  base.mul_(2.0);
  EXPECT_EQ(row3.to_vector<double>(), (std::vector<double>{0, 2, 4}));
  EXPECT_EQ(rows[0][1].item<double>(), 10.0);
  // A view keeps the storage alive after the base handle is gone.
  Tensor keep = from_data({1, 2, 3, 4}, Shape{2, 2}).slice(1, 2);
  EXPECT_EQ(keep.to_vector<float>(), (std::vector<float>{3, 4}));
}

TEST(Views, GradientsAccumulateIntoTheBase) {
  Tensor x = from_data({1, 2, 3, 4, 5, 6}, Shape{3, 2}, DType::float64).requires_grad_();
  Tensor y = sum(x.slice(0, 2) * 2.0) + sum(x[2] * 3.0) + sum(x.reshape({-1})[0]);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 2, 2, 2, 3, 3}));
}

TEST(ViewErrors, ReshapeSliceSelect) {
  Tensor x = ones({2, 3});
  EXPECT_TIDE_ERROR((x.reshape({4, 2})), "[reshape]", "(2, 3)", "(4, 2)");
  EXPECT_TIDE_ERROR((x.reshape({-1, 4})), "[reshape]", "(2, 3)");
  EXPECT_TIDE_ERROR((x.reshape({-1, -1})), "[reshape]", "-1");
  EXPECT_TIDE_ERROR((x.reshape({-2, 3})), "[reshape]", "-2");
  EXPECT_TIDE_ERROR(x.slice(1, 3), "[slice]", "(2, 3)", "[1, 3)");
  EXPECT_TIDE_ERROR(x.slice(-1, 1), "[slice]", "(2, 3)");
  EXPECT_TIDE_ERROR(x.slice(2, 1), "[slice]", "(2, 3)");
  EXPECT_TIDE_ERROR(x[2], "[select]", "(2, 3)", "2");
  EXPECT_TIDE_ERROR(x[-1], "[select]", "(2, 3)");
  EXPECT_TIDE_ERROR(x[0][0][0], "[select]", "0-d");
  EXPECT_TIDE_ERROR(full({}, 1.0).slice(0, 0), "[slice]", "0-d");
  // The edges that are allowed.
  EXPECT_EQ(x.slice(2, 2).shape(), (Shape{0, 3}));
  EXPECT_EQ(x.slice(0, 2).shape(), (Shape{2, 3}));
  EXPECT_EQ(x[1].shape(), (Shape{3}));
}

}  // namespace
}  // namespace tide
