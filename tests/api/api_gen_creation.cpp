// The creation generators of the random API driver: zeros / ones / full, arange, rand /
// randn with seeded generators, from_vector / from_data, clone and cast; and the random
// shapes, dtypes and values every generator uses.
#include <cfloat>
#include <cmath>
#include <cstdlib>

#include "tests/api/api_gen_util.h"
#include "tests/api/api_ops.h"

namespace tide::api {
namespace gen {

namespace {

bool huge_allocations_ok() {
#if defined(__SANITIZE_ADDRESS__)
  // ASan aborts on an impossible malloc unless told to return null, as CI tells it.
  const char* o = std::getenv("ASAN_OPTIONS");
  return o && std::string(o).find("allocator_may_return_null=1") != std::string::npos;
#else
  return true;
#endif
}

}  // namespace

void g_fill(Case& c) {
  const DType t = random_dtype(c);
  const int kind = int(c.uniform(0, 2));  // zeros, ones, full
  double value = kind == 1 ? 1 : 0;
  bool out_of_range = false;
  if (kind == 2) {
    if (is_floating(t)) {
      value = random_values(c, 1, t)[0];
    } else if (c.chance(0.05)) {
      value = c.pick(std::vector<double>{1e30, -1e30, NAN, INFINITY, 5e9});
      out_of_range = !fits(std::trunc(value), t);
    } else {
      value = double(c.uniform(-6, 6)) + (c.chance(0.2) ? 0.5 : 0.0);  // truncated
    }
  }
  std::vector<int64_t> dims = random_shape(c).vec();
  std::string invalid;
  bool keep = true;
  Device dev = c.device;
  switch (c.chance(0.15) ? c.uniform(0, 5) : -1) {
    case 0:
      if (dims.empty()) dims.push_back(1);
      dims[size_t(c.uniform(0, int64_t(dims.size()) - 1))] = -c.uniform(1, 3);
      invalid = "a negative extent";
      break;
    case 1:
      dims.assign(9, 1);
      invalid = "more than 8 dims";
      break;
    case 2:
      dims = c.chance(0.5) ? std::vector<int64_t>{P(61)} : std::vector<int64_t>{P(31), P(31), 2};
      invalid = "more than 2^60 elements";
      break;
    case 3:
      if (!c.traced && huge_allocations_ok()) {
        dims = {P(50), 3};
        invalid = "out of memory (2^52+ bytes)";
      }
      break;
    case 4:  // empty, with a huge extent: valid, but kept out of the pool
      dims = {0, P(40)};
      keep = false;
      break;
    case 5:
      dev = Device::cuda(kMissingGpu);
      invalid = "a device this process does not have";
      break;
  }
  const char* names[] = {"zeros", "ones", "full"};
  std::string text = c.next_name() + " = " + names[kind] + "(" + dims_text(dims) +
                     (kind == 2 ? ", " + fmt(value) : "") + ", " + dt(t) + ", " + dev_text(dev) +
                     ")";
  std::optional<Outcome> want =
      invalid.empty() ? gate_float_to_int(c, out_of_range, text) : Outcome::error;
  if (!want) return;
  Ref r;
  if (invalid.empty()) {
    Shape s(dims);
    r = fresh(s, t);
    for (int64_t i = 0; i < r.numel(); ++i) r.set(i, {to_dtype(value, t), 0});
  }
  run_op(c, text, *want, invalid, r, dev, false, {}, [&] {
    Shape s(dims);
    return kind == 0 ? zeros(s, t, dev) : kind == 1 ? ones(s, t, dev) : full(s, value, t, dev);
  });
  if (!keep && !c.pool.empty() && c.pool.back().t.numel() == 0) c.pool.pop_back();
}

void g_arange(Case& c) {
  const DType t = random_dtype(c);
  const Device dev = c.device;
  if (c.chance(0.2)) {  // arange(n): int64 by default
    const int64_t n = c.uniform(-2, 12);
    Ref r = fresh(Shape{std::max<int64_t>(n, 0)}, DType::int64);
    for (int64_t i = 0; i < r.numel(); ++i) r.set(i, {double(i), 0});
    run_op(c, c.next_name() + " = arange(" + std::to_string(n) + ")", Outcome::value, "", r, dev,
           false, {}, [&] { return arange(n, DType::int64, dev); });
    return;
  }
  double start =
      c.chance(0.5) ? double(c.uniform(-5, 5)) : c.pick(std::vector<double>{0.5, -2.5, 0.25});
  double step = c.pick(std::vector<double>{1, 2, 0.5, -1, -0.25, 3, -2});
  double end =
      start + step * double(c.uniform(-1, 12)) + c.pick(std::vector<double>{0, 0.3, -0.3}) * step;
  std::string invalid;
  if (c.chance(0.1)) {
    double bad = c.pick(std::vector<double>{NAN, INFINITY, -INFINITY});
    switch (c.uniform(0, 3)) {
      case 0: step = 0; break;
      case 1: start = bad; break;
      case 2: end = bad; break;
      default: step = bad;
    }
    invalid = "a zero step or a non-finite bound";
  }
  Ref r;
  if (invalid.empty()) {
    const double count = std::ceil((end - start) / step);
    r = fresh(Shape{count > 0 ? int64_t(count) : 0}, t);
    for (int64_t i = 0; i < r.numel(); ++i) r.set(i, {to_dtype(start + double(i) * step, t), 0});
  }
  run_op(c,
         c.next_name() + " = arange(" + fmt(start) + ", " + fmt(end) + ", " + fmt(step) + ", " +
             dt(t) + ", " + dev_text(dev) + ")",
         invalid.empty() ? Outcome::value : Outcome::error, invalid, r, dev, false, {},
         [&] { return arange(start, end, step, t, dev); });
}

// rand / randn in a traced body, from the body's generator: the caller seeds it alike for
// the eager run and the traced call, whose results it compares. Run eagerly, the values are
// read back as the reference; while a trace records, nothing is read, and zeros stand in
// (a traced body chooses nothing by value).
void g_random_traced(Case& c) {
  if (!c.traced || !c.traced_generator) return;
  const bool normal = c.chance(0.5);
  const Shape s = random_shape(c);
  const DType t = random_floating(c);
  const Device dev = c.device;
  Tensor a;
  if (!c.call(c.next_name() + " = " + (normal ? "randn(" : "rand(") + s.str() + ", " + dt(t) +
                  ", the body's generator, " + dev_text(dev) + ")",
              "", [&] {
                a = normal ? randn(s, t, *c.traced_generator, dev)
                           : rand(s, t, *c.traced_generator, dev);
              }))
    return;
  const bool recording = tide::detail::capturing() != nullptr;
  add_result(c, a, recording ? fresh(s, t) : from_values(a.to_vector<double>(), s, t), dev, false,
             {});
}

// rand / randn: values read back at once (a sync); the same seed gives the same numbers.
void g_random(Case& c) {
  const bool normal = c.chance(0.5);
  const char* op = normal ? "randn" : "rand";
  const Shape s = random_shape(c);
  const Device dev = c.device;
  const uint64_t seed = c.rng();
  DType t = random_floating(c);
  if (c.chance(0.1)) {
    t = c.chance(0.5) ? DType::int32 : DType::int64;
    Generator g(seed);
    c.call(c.next_name() + " = " + op + "(" + s.str() + ", " + dt(t) + ")", "an integer dtype",
           [&] { (void)(normal ? randn(s, t, g, dev) : rand(s, t, g, dev)); });
    return;
  }
  const bool use_default = c.chance(0.2);
  auto draw = [&](Generator& g) {
    if (use_default) manual_seed(seed);
    Generator& gen = use_default ? default_generator() : g;
    return normal ? randn(s, t, gen, dev) : rand(s, t, gen, dev);
  };
  Generator g1(seed), g2(seed);
  const std::string text = std::string(op) + "(" + s.str() + ", " + dt(t) +
                           (use_default ? ", default generator seeded " : ", Generator(") +
                           std::to_string(seed) + (use_default ? "" : ")") + ", " + dev_text(dev) +
                           ")";
  Tensor a, b;
  std::vector<double> got;
  if (!c.call(c.next_name() + " = " + text + "; read back", "", [&] {
        a = draw(g1);
        got = a.to_vector<double>();
      }))
    return;
  for (double x : got)
    if (normal ? !std::isfinite(x) : !(x >= 0 && x < 1))
      c.fail(std::string(op) + " gave " + fmt(x));
  Ref r = from_values(got, s, t);
  add_result(c, a, r, dev, false, {});
  if (c.call(c.next_name() + " = " + text + " again", "", [&] { b = draw(g2); }))
    add_result(c, b, from_values(got, s, t), dev, false, {});  // the same numbers
}

void g_from_vector(Case& c) {
  const Shape s = random_shape(c);
  const DType t = random_dtype(c);
  std::vector<double> v = random_values(c, s.numel(), t);
  if (!c.chance(0.1)) {
    make_val(c, s, t, c.device, v);
    return;
  }
  if (v.empty() || c.chance(0.5)) v.push_back(1);
  else v.pop_back();
  const Device dev = c.device;
  c.call(c.next_name() + " = from_data(" + std::to_string(v.size()) + " values, " + s.str() + ", " +
             dt(t) + ")",
         "the value count differs from the shape's", [&] { (void)from_data(v, s, t, dev); });
}

void g_clone_cast(Case& c) {
  Val a = operand(c);
  const Device dev = a.t.device();
  if (c.chance(0.4)) {
    Ref r = map1(a.r, a.r.dtype, [](El e) { return e; });
    run_op(c, c.next_name() + " = clone(" + d(a) + ")", Outcome::value, "", r, dev, true, {&a},
           [&] { return clone(a.t); });
    return;
  }
  DType t = random_dtype(c);
  // A traced body makes no choice that depends on values: no float -> int casts there.
  if (c.traced && is_float(a) && !is_floating(t)) t = random_floating(c);
  const std::string text = c.next_name() + " = cast(" + d(a) + ", " + dt(t) + ")";
  bool out_of_range = false;
  if (is_float(a) && !is_floating(t))
    for (int64_t i = 0; i < a.r.numel(); ++i) {
      const El e = a.r.at(i);
      out_of_range |=
          !(e.tol < kAny) || !fits(std::trunc(e.v - e.tol), t) || !fits(std::trunc(e.v + e.tol), t);
    }
  std::optional<Outcome> want = gate_float_to_int(c, out_of_range, text);
  if (!want) return;
  const bool records = is_float(a) && is_floating(t);
  run_op(c, text, *want, "", cast_ref(a.r, t).r, dev, records, {&a}, [&] { return cast(a.t, t); });
}

}  // namespace gen

using namespace gen;

Shape random_shape(Case& c, int64_t max_numel, int max_rank) {
  int rank = int(c.pick(std::vector<int>{0, 1, 1, 2, 2, 2, 3, 3, 4}));
  if (c.chance(0.03)) rank = int(c.uniform(5, 8));
  rank = std::min(rank, max_rank);
  std::vector<int64_t> d(static_cast<size_t>(rank));
  for (auto& x : d) x = c.chance(0.04) ? 0 : c.chance(0.25) ? 1 : c.uniform(2, 5);
  auto numel = [&] {
    int64_t n = 1;
    for (int64_t x : d) n *= x;
    return n;
  };
  while (numel() > max_numel)
    for (auto& x : d)
      if (x > 1 && numel() > max_numel) --x;
  // Rarely, one long row: past the kernels' parallel grain (32768 elements).
  if (!c.traced && max_numel >= 36 && c.chance(0.005)) d = {c.uniform(32768, 40000)};
  return Shape(d);
}

DType random_dtype(Case& c) {
  const int64_t k = c.uniform(0, 99);
  return k < 40 ? DType::float32 : k < 65 ? DType::float64 : k < 85 ? DType::int32 : DType::int64;
}
DType random_floating(Case& c) { return c.chance(0.6) ? DType::float32 : DType::float64; }

std::vector<double> random_values(Case& c, int64_t n, DType t) {
  std::vector<double> v(static_cast<size_t>(n));
  const int style = int(c.uniform(0, 99));
  if (!is_floating(t)) {
    // Narrow ranges in traced bodies: nothing there may depend on whether a value overflows.
    const int64_t lim = c.traced     ? 6
                        : style < 80 ? 6
                        : style < 95 ? 1000
                                     : (t == DType::int64 ? P(40) : P(30));
    for (auto& x : v) x = double(c.uniform(-lim, lim));
    if (!c.traced && t == DType::int32 && style >= 98)  // the ends of int32
      for (auto& x : v)
        if (c.chance(0.3)) x = c.chance(0.5) ? -2147483648.0 : 2147483647.0;
    return v;
  }
  const std::vector<double> edge = {
      0.0,      -0.0,      1.0,   -1.0,   NAN,
      INFINITY, -INFINITY, 1e-30, -1e-30, t == DType::float32 ? 1e30 : 1e300,
      1e-40};
  for (auto& x : v) {
    if (style < 60) x = c.real(-3, 3);
    else if (style < 85) x = double(c.uniform(-4, 4));  // ties and exact sums
    else if (style < 95) x = c.real(0.5, 3);
    else x = c.chance(0.3) ? c.pick(edge) : c.real(-3, 3);
  }
  return v;
}

Val make_val(Case& c, const Shape& s, DType t, Device device, const std::vector<double>& values) {
  const bool typed = c.chance(0.6);
  const std::string text =
      c.next_name() + " = " + (typed ? "from_vector<" + dt(t) + ">(" : "from_data(") +
      preview(values) + ", " + s.str() + (typed ? "" : ", " + dt(t)) + ", " + device.str() + ")";
  Tensor y;
  c.call(text, "", [&] {
    if (!typed) {
      y = from_data(values, s, t, device);
      return;
    }
    dispatch_dtype(t, [&](auto z) {
      using T = decltype(z);
      std::vector<T> tv(values.size());
      for (size_t i = 0; i < values.size(); ++i) tv[i] = T(values[i]);
      y = from_vector(tv, s, device);
    });
  });
  Ref r = from_values(values, s, t);
  r.st->traced_host_data = c.traced;
  return add_result(c, y, std::move(r), device, false, {});
}

Val make_val(Case& c, const Shape& s, DType t) {
  return make_val(c, s, t, c.device, random_values(c, s.numel(), t));
}

}  // namespace tide::api
