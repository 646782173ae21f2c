// The op generators of the random API driver and their table (see api_generators.h):
// elementwise, reductions, views, linear algebra, in-place ops, host reads, devices,
// autograd misuse and undefined tensors here; creation in api_gen_creation.cpp. Each
// generator picks operands, decides (by the reference) whether its call is valid, runs it
// through Case::call and pools what it returns. The reference alone says what a valid call
// gives; the generator only chooses inputs.
#include "tests/api/api_generators.h"

#include <cfloat>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "core/engine/capture.h"
#include "tests/api/api_gen_util.h"
#include "tests/api/api_ops.h"

namespace tide::api {

namespace gen {
namespace {

// A shape that broadcasts with s: the same, fewer leading dims, some dims 1, more leading
// dims, or 0-d.
Shape compatible_shape(Case& c, const Shape& s) {
  std::vector<int64_t> d = s.vec();
  switch (c.uniform(0, 4)) {
    case 0: break;
    case 1:
      if (!d.empty()) d.erase(d.begin(), d.begin() + c.uniform(1, int64_t(d.size())));
      break;
    case 2:
      for (auto& x : d)
        if (c.chance(0.4)) x = 1;
      break;
    case 3:
      if (int(d.size()) < 6 && s.numel() <= 16) d.insert(d.begin(), c.uniform(1, 3));
      break;
    default: d.clear();
  }
  return Shape(d);
}
// A shape that does not broadcast with s, when s has an extent other than 1.
std::optional<Shape> incompatible_shape(Case& c, const Shape& s) {
  std::vector<int64_t> d = s.vec();
  std::vector<size_t> idx;
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i] != 1) idx.push_back(i);
  if (idx.empty()) return std::nullopt;
  size_t i = c.pick(idx);
  d[i] = d[i] + 1 == 1 ? 2 : d[i] + 1;
  return Shape(d);
}

DType other_dtype(Case& c, DType t) {
  DType o;
  do o = random_dtype(c);
  while (o == t);
  return o;
}

// A random factorisation of n into up to four extents (n == 0: at least one 0).
std::vector<int64_t> reshape_dims(Case& c, int64_t n) {
  std::vector<int64_t> d(size_t(c.uniform(n == 1 ? 0 : 1, 4)), 1);
  if (n == 0) {
    for (auto& x : d) x = c.uniform(0, 3);
    d[size_t(c.uniform(0, int64_t(d.size()) - 1))] = 0;
    return d;
  }
  int64_t m = n;
  for (int64_t p = 2; m > 1; ++p)
    while (m % p == 0) {
      d[size_t(c.uniform(0, int64_t(d.size()) - 1))] *= p;
      m /= p;
    }
  if (!d.empty() && c.chance(0.3)) d[size_t(c.uniform(0, int64_t(d.size()) - 1))] = -1;
  return d;
}

// ---- elementwise -----------------------------------------------------------------------

void g_binary(Case& c) {
  const BinaryOp& op = c.pick(binary_ops());
  Val a = operand(c);
  Val b;
  const int variant = int(c.uniform(0, 99));
  const Device dev = a.t.device();
  if (variant < 60) {
    const Shape bs = compatible_shape(c, a.r.shape);
    b = make_val(c, bs, a.r.dtype, dev, random_values(c, bs.numel(), a.r.dtype));
  } else if (variant < 80) {
    b = operand(c);
  } else if (variant < 88) {
    const DType o = other_dtype(c, a.r.dtype);
    const Shape bs = compatible_shape(c, a.r.shape);
    b = make_val(c, bs, o, dev, random_values(c, bs.numel(), o));
  } else if (variant < 93) {
    std::optional<Shape> s = incompatible_shape(c, a.r.shape);
    b = make_val(c, s ? *s : a.r.shape, a.r.dtype, dev,
                 random_values(c, (s ? *s : a.r.shape).numel(), a.r.dtype));
  } else if (variant < 97 && !c.traced) {
    b = make_val(c, a.r.shape, a.r.dtype, other_device(c),
                 random_values(c, a.r.numel(), a.r.dtype));
  } else {
    b.name = "Tensor()";
  }
  if (c.chance(0.5)) std::swap(a, b);
  std::string why;
  std::optional<Shape> s;
  if (!a.t.defined() || !b.t.defined()) why = "an undefined operand";
  else if (a.r.dtype != b.r.dtype) why = "dtypes differ";
  else if (a.t.device() != b.t.device()) why = "devices differ";
  else if (!(s = broadcast(a.r.shape, b.r.shape))) why = "shapes do not broadcast";
  else if (op.floating_only && !is_float(a)) why = std::string(op.name) + " of integers";
  const bool use_op = op.symbol && c.chance(0.4);
  const std::string text = c.next_name() + " = " +
                           (use_op ? d(a) + " " + op.symbol + " " + d(b)
                                   : std::string(op.name) + "(" + d(a) + ", " + d(b) + ")");
  auto f = [&] { return use_op ? op.op(a.t, b.t) : op.call(a.t, b.t); };
  if (!why.empty()) {
    c.call(text, why, [&] { (void)f(); });
    return;
  }
  // Two of the rare large operands (32768+ elements) of unrelated shapes can broadcast to
  // billions of elements, which the double-precision reference cannot hold.
  if (s->numel() > (int64_t(1) << 22)) {
    c.note(text + "   # left out: its result would have " + std::to_string(s->numel()) +
           " elements");
    return;
  }
  const DType t = a.r.dtype;
  Ref r =
      map2(a.r, b.r, *s, op.mask ? mask_dtype(t) : t, [&](El x, El y) { return op.rule(x, y, t); });
  std::optional<Outcome> want = gate_overflow(c, r, text);
  if (want) run_op(c, text, *want, "", r, a.t.device(), op.records, {&a, &b}, f);
}

double random_scalar(Case& c, const ScalarOp& op, DType t) {
  if (std::string(op.name) == "pow")
    return c.pick(std::vector<double>{2, 1, 0.5, 3, -1, 0, 1.5, -2});
  if (is_floating(t)) {
    if (c.chance(0.1)) return c.pick(std::vector<double>{NAN, INFINITY, -INFINITY, 1e30, 1e-30});
    if (c.chance(0.6)) return c.pick(std::vector<double>{0, 1, -1, 2, 0.5, -3.25, 1e-3, 0.1});
    return c.real(-4, 4);
  }
  if (c.chance(0.05)) return c.pick(std::vector<double>{1e30, NAN, INFINITY, -5e9, 3e9});
  if (c.chance(0.2)) return double(c.uniform(-4, 4)) + 0.5;
  return double(c.uniform(-6, 6));
}

void g_scalar(Case& c) {
  const ScalarOp& op = c.pick(scalar_ops());
  Val a = operand(c);
  const DType t = a.r.dtype;
  const double s = random_scalar(c, op, t);
  const bool use_op = op.symbol && c.chance(0.4);
  std::string call_text = std::string(op.name) + "(" + d(a) + ", " + fmt(s) + ")";
  if (use_op) {
    call_text = op.symbol;
    call_text.replace(call_text.find('a'), 1, d(a));
    call_text.replace(call_text.find('s'), 1, fmt(s));
  }
  const std::string text = c.next_name() + " = " + call_text;
  auto f = [&] { return use_op ? op.op(a.t, s) : op.call(a.t, s); };
  std::string why;
  if (op.floating_only && !is_floating(t)) why = std::string(op.name) + " of integers";
  else if (!is_floating(t) && std::isfinite(s) && s != std::floor(s) && !op.any_scalar)
    why = "a fractional scalar for an integer tensor";
  if (!why.empty()) {
    c.call(text, why, [&] { (void)f(); });
    return;
  }
  // An integer tensor meets T(s): s must be in range (comparisons: ceil / floor of it).
  std::optional<Outcome> want =
      gate_float_to_int(c, !is_floating(t) && !fits(std::floor(s), t), text);
  if (!want) return;
  Ref r = map1(a.r, op.mask ? mask_dtype(t) : t, [&](El x) { return op.rule(x, s, t); });
  if (*want == Outcome::value) want = gate_overflow(c, r, text);
  if (want) run_op(c, text, *want, "", r, a.t.device(), op.records, {&a}, f);
}

void g_unary(Case& c) {
  const UnaryOp& op = c.pick(unary_ops());
  Val a = operand(c);
  const DType t = a.r.dtype;
  const bool use_op = std::string(op.name) == "neg" && c.chance(0.5);
  const std::string text =
      c.next_name() + " = " + (use_op ? "-" + d(a) : std::string(op.name) + "(" + d(a) + ")");
  auto f = [&] { return use_op ? -a.t : op.call(a.t); };
  if (op.floating_only && !is_floating(t)) {
    c.call(text, std::string(op.name) + " of integers", [&] { (void)f(); });
    return;
  }
  Ref r = map1(a.r, t, [&](El x) { return op.rule(x, t); });
  std::optional<Outcome> want = gate_overflow(c, r, text);
  if (want) run_op(c, text, *want, "", r, a.t.device(), true, {&a}, f);
}

// ---- reductions, views, linear algebra -------------------------------------------------

void g_reduce(Case& c) {
  const Red k = c.pick(std::vector<Red>{Red::sum, Red::mean, Red::max, Red::argmax});
  Val a = operand(c);
  const int nd = a.r.shape.ndim();
  const bool all = c.chance(0.3);
  const int axis = int(c.uniform(-nd - 1, nd));
  const bool keepdim = c.chance(0.5);
  const std::string text =
      c.next_name() + " = " + red_name(k) + "(" + d(a) +
      (all ? ")" : ", " + std::to_string(axis) + (keepdim ? ", keepdim)" : ")"));
  Expect e = reduce_ref(k, a.r, all ? std::nullopt : std::optional<int>(axis), keepdim);
  auto f = [&] { return all ? red_call(k, a.t) : red_call(k, a.t, axis, keepdim); };
  if (!e.invalid.empty()) {
    c.call(text, e.invalid, [&] { (void)f(); });
    return;
  }
  std::optional<Outcome> want = gate_overflow(c, e.r, text);
  if (want) run_op(c, text, *want, "", e.r, a.t.device(), k != Red::argmax, {&a}, f);
}

// sum_to: the reverse of broadcasting, for gradients (floating tensors).
void g_sum_to(Case& c) {
  Val a = operand(c, is_float, random_floating(c));
  if (!is_float(a)) return;
  const bool bad = c.chance(0.15);
  Shape s = compatible_shape(c, a.r.shape);
  if (bad) s = incompatible_shape(c, a.r.shape).value_or(Shape{a.r.numel() + 1});
  const std::string text = c.next_name() + " = sum_to(" + d(a) + ", " + s.str() + ")";
  std::optional<Shape> b = broadcast(a.r.shape, s);
  if (!b || *b != a.r.shape) {
    c.call(text, "the shape does not broadcast to the tensor's", [&] { (void)sum_to(a.t, s); });
    return;
  }
  if (s == a.r.shape) {  // nothing to sum: the tensor itself (sharing its storage)
    Tensor y;
    if (c.call(text, "", [&] { y = sum_to(a.t, s); })) {
      if (y.id() != a.t.id()) c.fail(text + " to its own shape is not the tensor itself");
      c.add(y, a.r, a.t.device(), a.requires_grad, a.leaf, a.frozen);
    }
    return;
  }
  Ref r = fresh(s, a.r.dtype);
  std::vector<std::vector<El>> parts(static_cast<size_t>(s.numel()));
  for (int64_t i = 0; i < a.r.numel(); ++i)
    parts[size_t(broadcast_index(a.r.shape, s, i))].push_back(a.r.at(i));
  for (int64_t j = 0; j < s.numel(); ++j) {
    double v = 0, tol = 0, mag = 0;
    bool any = false;
    for (const El& e : parts[size_t(j)]) {
      v += e.v;
      tol += e.tol;
      mag += std::fabs(e.v);
      any |= !(e.tol < kAny);
    }
    // Summed axis by axis in a double accumulator, each sum rounded to the dtype.
    const double n = double(parts[size_t(j)].size());
    const double rounds = double(a.r.shape.ndim() + 1) * unit(a.r.dtype) + n * unit(DType::float64);
    r.set(j, any ? El{v, kAny} : finish(v, tol + rounds * mag, a.r.dtype));
  }
  run_op(c, text, Outcome::value, "", r, a.t.device(), true, {&a}, [&] { return sum_to(a.t, s); });
}

void g_view(Case& c) {
  Val a = operand(c);
  const int kind = int(c.uniform(0, 4));
  const int64_t n = a.r.shape.ndim() ? a.r.shape[0] : 0;
  if (kind == 4) {  // the same storage, no autograd history
    Tensor y;
    if (c.call(c.next_name() + " = " + d(a) + ".detach()", "", [&] { y = a.t.detach(); }))
      c.add(y, a.r, a.t.device(), false, true, a.frozen);
    return;
  }
  Expect e;
  std::string text;
  std::function<Tensor()> f;
  if (kind <= 1) {
    std::vector<int64_t> dims = reshape_dims(c, a.r.numel());
    if (c.chance(0.15)) {
      switch (c.uniform(0, 2)) {
        case 0: dims.push_back(2); break;
        case 1: dims.insert(dims.end(), {-1, -1}); break;
        default: dims.push_back(-2);
      }
    }
    e = reshape_ref(a.r, dims);
    text = c.next_name() + " = " + d(a) + ".reshape(" + dims_text(dims) + ")";
    f = [&a, dims] { return a.t.reshape(dims); };
  } else if (kind == 2) {
    int64_t b = c.uniform(0, n), end = c.uniform(b, n);
    if (c.chance(0.15)) (c.chance(0.5) ? end : b) = c.chance(0.5) ? n + 1 : -1;
    e = slice_ref(a.r, b, end);
    text = c.next_name() + " = " + d(a) + ".slice(" + std::to_string(b) + ", " +
           std::to_string(end) + ")";
    f = [&a, b, end] { return a.t.slice(b, end); };
  } else {
    int64_t i = n > 0 ? c.uniform(0, n - 1) : 0;
    if (c.chance(0.15)) i = c.chance(0.5) ? n : -1;
    e = select_ref(a.r, i);
    text = c.next_name() + " = " + d(a) + "[" + std::to_string(i) + "]";
    f = [&a, i] { return a.t[i]; };
  }
  if (!e.invalid.empty()) c.call(text, e.invalid, [&] { (void)f(); });
  else run_op(c, text, Outcome::value, "", e.r, a.t.device(), true, {&a}, f, true);
}

void g_transpose(Case& c) {
  Val a = operand(c, [&](const Val& v) { return v.r.shape.ndim() == 2 || c.chance(0.2); });
  Expect e = transpose_ref(a.r);
  const std::string text = c.next_name() + " = transpose(" + d(a) + ")";
  if (!e.invalid.empty()) c.call(text, e.invalid, [&] { (void)transpose(a.t); });
  else
    run_op(c, text, Outcome::value, "", e.r, a.t.device(), true, {&a},
           [&] { return transpose(a.t); });
}

int64_t extent(Case& c) { return c.chance(0.05) ? c.uniform(6, 40) : c.uniform(0, 5); }

void g_matmul(Case& c) {
  const bool ta = c.chance(0.25), tb = c.chance(0.25);
  DType t = random_floating(c);
  Val a;
  if (const Val* p = c.pick_val([](const Val& v) { return v.r.shape.ndim() == 2 && is_float(v); });
      p && c.chance(0.5))
    a = *p, t = a.r.dtype;
  else a = make_val(c, Shape{extent(c), extent(c)}, t);
  const int64_t k = ta ? a.r.shape[0] : a.r.shape[1];
  int64_t n = extent(c), kb = k;
  DType tb_dtype = t;
  std::vector<int64_t> bdims;
  switch (c.chance(0.15) ? c.uniform(0, 3) : -1) {
    case 0: kb = k + 1; break;
    case 1: bdims = {k}; break;
    case 2: tb_dtype = t == DType::float32 ? DType::float64 : DType::float32; break;
    case 3:
      if (!c.traced) {  // both integer: re-make a as int32 too
        a = make_val(c, a.r.shape, DType::int32, c.device,
                     random_values(c, a.r.numel(), DType::int32));
        tb_dtype = DType::int32;
      }
      break;
  }
  if (bdims.empty()) bdims = tb ? std::vector<int64_t>{n, kb} : std::vector<int64_t>{kb, n};
  Val b = make_val(c, Shape(bdims), tb_dtype, a.t.device(),
                   random_values(c, Shape(bdims).numel(), tb_dtype));
  Expect e = matmul_ref(a.r, b.r, ta, tb);
  const std::string text = c.next_name() + " = matmul(" + d(a) + ", " + d(b) + ", {" +
                           (ta ? "true" : "false") + ", " + (tb ? "true" : "false") + "})";
  auto f = [&] { return matmul(a.t, b.t, MatmulOptions{ta, tb}); };
  if (!e.invalid.empty()) c.call(text, e.invalid, [&] { (void)f(); });
  else run_op(c, text, Outcome::value, "", e.r, a.t.device(), true, {&a, &b}, f);
}

void g_linear(Case& c) {
  DType t = random_floating(c);
  Val x;
  if (const Val* p = c.pick_val([](const Val& v) { return v.r.shape.ndim() == 2 && is_float(v); });
      p && c.chance(0.5))
    x = *p, t = x.r.dtype;
  else x = make_val(c, Shape{extent(c), extent(c)}, t);
  int64_t k = x.r.shape[1], m = extent(c), mb = m;
  DType bt = t;
  switch (c.chance(0.15) ? c.uniform(0, 2) : -1) {
    case 0: mb = m + 1; break;
    case 1: k = k + 1; break;
    case 2: bt = t == DType::float32 ? DType::float64 : DType::float32; break;
  }
  Val w = make_val(c, Shape{k, m}, t, x.t.device(), random_values(c, k * m, t));
  Val b = make_val(c, Shape{mb}, bt, x.t.device(), random_values(c, mb, bt));
  const bool relu_on = c.chance(0.5);
  Expect e = linear_ref(x.r, w.r, b.r, relu_on);
  const std::string text =
      c.next_name() + " = linear(" + d(x) + ", " + d(w) + ", " + d(b) + (relu_on ? ", relu)" : ")");
  auto f = [&] { return linear(x.t, w.t, b.t, relu_on); };
  if (!e.invalid.empty()) c.call(text, e.invalid, [&] { (void)f(); });
  else run_op(c, text, Outcome::value, "", e.r, x.t.device(), true, {&x, &w, &b}, f);
}

void g_softmax(Case& c) {
  Val a = operand(c, [&](const Val& v) { return is_float(v) || c.chance(0.15); });
  const bool log_out = c.chance(0.5);
  Expect e = softmax_ref(a.r, log_out);
  const std::string text =
      c.next_name() + " = " + (log_out ? "log_softmax(" : "softmax(") + d(a) + ")";
  auto f = [&] { return log_out ? log_softmax(a.t) : softmax(a.t); };
  if (!e.invalid.empty()) c.call(text, e.invalid, [&] { (void)f(); });
  else run_op(c, text, Outcome::value, "", e.r, a.t.device(), true, {&a}, f);
}

// ---- in place ----------------------------------------------------------------------------

// Why tide must refuse writing `self` in place from `other`, or "".
std::string in_place_refusal(const Val& self, const Val* other) {
  if (self.requires_grad) return "in place on a tensor that requires grad";
  if (!other) return "";
  if (!other->t.defined()) return "an undefined operand";
  if (other->r.dtype != self.r.dtype) return "dtypes differ";
  if (other->t.device() != self.t.device()) return "devices differ";
  if (other->r.shares(self.r)) {
    const bool same_view = other->r.off == self.r.off && other->r.shape == self.r.shape;
    const int64_t a0 = self.r.off, a1 = a0 + self.r.numel();
    const int64_t b0 = other->r.off, b1 = b0 + other->r.numel();
    if (!same_view && !(a1 <= b0 || b1 <= a0 || self.r.numel() == 0 || other->r.numel() == 0))
      return "the operand overlaps the tensor written";
  }
  std::optional<Shape> s = broadcast(self.r.shape, other->r.shape);
  if (!s || *s != self.r.shape) return "the operand does not broadcast into the tensor";
  return "";
}

void g_inplace(Case& c) {
  const Val* target = c.pick_val(writable);
  if (!target) return;
  Val self = *target;
  const DType t = self.r.dtype;
  const int kind = int(c.uniform(0, 4));  // add_, sub_, mul_ (tensor), mul_ (scalar), copy_
  Val other;
  const int variant = int(c.uniform(0, 99));
  if (kind != 3) {
    if (variant < 60) {
      Shape os = compatible_shape(c, self.r.shape);
      if (broadcast(self.r.shape, os) != std::optional<Shape>(self.r.shape)) os = self.r.shape;
      other = make_val(c, os, t, self.t.device(), random_values(c, os.numel(), t));
    } else if (variant < 80) {
      other = operand(c);
    } else if (variant < 90 && self.r.shape.ndim() >= 1 && self.r.shape[0] >= 1) {
      // Itself (allowed), or its first row: the same view when it has one row (allowed),
      // else an overlapping one (refused).
      other = self;
      if (c.chance(0.6)) {
        other.t = self.t.slice(0, 1);
        other.r = slice_ref(self.r, 0, 1).r;
        other.name = self.name + ".slice(0, 1)";
      }
    } else {
      const DType o = other_dtype(c, t);
      other = make_val(c, self.r.shape, o, self.t.device(), random_values(c, self.r.numel(), o));
    }
  }
  double alpha = 1;
  if ((kind <= 1 || kind == 3) && c.chance(0.5))
    alpha = is_floating(t) || c.chance(0.3) ? c.pick(std::vector<double>{-1, 2, 0.5, -0.25, 3})
                                            : double(c.uniform(-3, 3));
  const char* names[] = {"add_", "sub_", "mul_", "mul_", "copy_"};
  std::string args =
      kind == 3 ? fmt(alpha) : d(other) + (kind <= 1 && alpha != 1 ? ", " + fmt(alpha) : "");
  const std::string text = d(self) + "." + names[kind] + "(" + args + ")";
  auto f = [&] {
    switch (kind) {
      case 0: self.t.add_(other.t, alpha); break;
      case 1: self.t.sub_(other.t, alpha); break;
      case 2: self.t.mul_(other.t); break;
      case 3: self.t.mul_(alpha); break;
      default: self.t.copy_(other.t);
    }
  };
  std::string why = in_place_refusal(self, kind == 3 ? nullptr : &other);
  if (why.empty() && self.r.st->traced_host_data && !KnownDefects::traced_write_to_host_data) {
    c.skip("traced_write_to_host_data", text);
    return;
  }
  const bool fractional = !is_floating(t) && alpha != std::floor(alpha);
  if (why.empty() && fractional) {
    if (!KnownDefects::int_inplace_fractional_scalar) {
      c.skip("int_inplace_fractional_scalar", text);
      return;
    }
    why = "a fractional scalar for an integer tensor";
  }
  if (!why.empty()) {
    c.call(text, why, f);
    return;
  }
  // The new values, all computed before any is stored (the operand may be self).
  Ref now = map2(
      self.r, kind == 3 ? from_values({alpha}, Shape{}, t) : other.r, self.r.shape, t,
      [&](El x, El y) -> El {
        switch (kind) {
          case 0: return alpha == 1 ? rule_add(x, y, t) : rule_add_scaled(x, y, alpha, t);
          case 1:
            return alpha == 1 ? rule_add(x, {-y.v, y.tol}, t) : rule_add_scaled(x, y, -alpha, t);
          case 2: return rule_mul(x, y, t);
          case 3: return rule_mul(x, {is_floating(t) ? to_dtype(alpha, t) : alpha, 0}, t);
          default: return y;
        }
      });
  std::optional<Outcome> want = gate_overflow(c, now, text);
  if (!want || !c.call(text, *want, "", f)) return;
  for (int64_t i = 0; i < now.numel(); ++i)
    self.r.set(i, *want == Outcome::either ? El{0, kAny} : now.at(i));
}

// ---- host reads, devices, autograd misuse, undefined tensors -----------------------------

void g_read(Case& c) {
  const Val* p = c.pick_val();
  if (!p) return;
  Val v = *p;
  const int kind = int(c.uniform(0, 6));
  // While a trace records, every host read must throw. (A traced body that runs eagerly,
  // as a warm-up call does, reads like any code.)
  const bool recording = tide::detail::capturing() != nullptr;
  const std::string inside = "a host read inside trace::function";
  if (kind == 0) {
    const std::string text = d(v) + ".item()";
    const std::string why = recording ? inside
                            : v.r.numel() != 1
                                ? "item of " + std::to_string(v.r.numel()) + " elements"
                                : "";
    double got = 0;
    if (!c.call(text, why,
                [&] { got = is_float(v) ? v.t.item<double>() : double(v.t.item<int64_t>()); }))
      return;
    std::string m = mismatch(view(v.r, Shape{}, v.r.off), {got});
    if (!m.empty()) c.fail(text + " is wrong: " + m);
  } else if (kind == 1) {
    if (recording) {
      c.call(d(v) + ".to_vector()", inside, [&] { (void)v.t.to_vector<double>(); });
    } else {
      c.note(d(v) + ".to_vector()");
      c.check(v);
    }
  } else if (kind == 2) {
    c.call(d(v) + ".wait_to_read()", recording ? inside : "", [&] { v.t.wait_to_read(); });
  } else if (kind == 3) {
    std::ostringstream os;
    c.call("std::cout << " + d(v), recording ? inside : "", [&] { os << v.t; });
    if (!recording && os.str().rfind("Tensor(", 0) != 0) c.fail("printing gave '" + os.str() + "'");
  } else if (kind == 4) {
    c.call(d(v) + ".is_ready()", "", [&] { (void)v.t.is_ready(); });
  } else if (kind == 5) {
    c.call("wait_all()", recording ? inside : "", [] { wait_all(); });
  } else {
    // Not a host read: waits, and never rethrows. Inside a trace it is not specified.
    c.call("Engine::get().synchronize()", recording ? Outcome::either : Outcome::value,
           "synchronize inside trace::function", [] { Engine::get().synchronize(); });
  }
}

void g_to_device(Case& c) {
  const Val* p = c.pick_val();
  if (!p) return;
  Val v = *p;
  const int kind = int(c.uniform(0, 5));
  if (kind == 0) {
    c.call(d(v) + ".to(cuda:" + std::to_string(kMissingGpu) + ")", "no such device",
           [&] { (void)v.t.to(Device::cuda(kMissingGpu)); });
    return;
  }
  const Device to = kind == 1               ? v.t.device()
                    : v.t.device().is_cpu() ? Device::cuda(kFakeGpu)
                                            : Device::cpu();
  const std::string text = c.next_name() + " = " + d(v) + ".to(" + to.str() + ")";
  if (to == v.t.device()) {  // the same tensor
    Tensor y;
    if (c.call(text, "", [&] { y = v.t.to(to); })) {
      if (y.id() != v.t.id()) c.fail(text + " on its own device is not the tensor itself");
      c.add(y, v.r, to, v.requires_grad, v.leaf, v.frozen);
    }
    return;
  }
  run_op(c, text, Outcome::value, "", map1(v.r, v.r.dtype, [](El e) { return e; }), to, true, {&v},
         [&] { return v.t.to(to); });
}

void g_grad_misuse(Case& c) {
  const int64_t kind = c.uniform(0, 4);
  // backward() misuse mostly on values that require grad.
  const Val* p = kind >= 2 && c.chance(0.8)
                     ? c.pick_val([](const Val& v) { return v.requires_grad; })
                     : nullptr;
  if (!p) p = c.pick_val();
  if (!p) return;
  Val v = *p;
  switch (kind) {
    case 0: {  // requires_grad_: floating leaves only
      std::string why = !is_float(v) ? "requires_grad_ on integers"
                        : !v.leaf    ? "requires_grad_ on a non-leaf"
                                     : "";
      if (!c.call(d(v) + ".requires_grad_()", why, [&] { v.t.requires_grad_(); })) return;
      for (Val& q : c.pool)
        if (q.t.id() == v.t.id()) q.requires_grad = true;
      for (Val& q : c.results)
        if (q.t.id() == v.t.id()) q.requires_grad = true;
      return;
    }
    case 1:
      if (!v.requires_grad)
        c.call(d(v) + ".backward()", "backward of a tensor that does not require grad",
               [&] { v.t.backward(); });
      return;
    case 2:
      if (v.requires_grad && v.r.numel() != 1)
        c.call(d(v) + ".backward()", "backward of a non-scalar without a gradient",
               [&] { v.t.backward(); });
      return;
    case 3:
      if (v.requires_grad) {
        Tensor g = zeros(Shape{v.r.numel() + 1}, v.r.dtype, v.t.device());
        c.call(d(v) + ".backward(zeros(" + std::to_string(v.r.numel() + 1) + "))",
               "a gradient of the wrong shape", [&] { v.t.backward(g); });
      }
      return;
    default:
      if (v.requires_grad) {
        const Device other = v.t.device().is_cpu() ? Device::cuda(kFakeGpu) : Device::cpu();
        const std::string text = d(v) + ".backward(ones on " + other.str() + ")";
        if (!KnownDefects::backward_grad_on_other_device) {
          c.skip("backward_grad_on_other_device", text);
          return;
        }
        Tensor g = ones(v.r.shape, v.r.dtype, other);
        c.call(text, "a gradient on another device", [&] { v.t.backward(g); });
      }
  }
}

void g_undefined(Case& c) {
  Val v = operand(c);
  const Tensor u;
  const int kind = int(c.uniform(0, 9));
  const std::vector<std::string> names = {
      "add(Tensor(), v)",        "sum(Tensor())",   "Tensor().reshape({1})", "matmul(v, Tensor())",
      "cast(Tensor(), float64)", "clone(Tensor())", "relu(Tensor())",        "Tensor().item()",
      "v.copy_(Tensor())",       "Tensor().to(cpu)"};
  c.call(names[size_t(kind)] + " with v = " + d(v), "an undefined tensor", [&] {
    switch (kind) {
      case 0: (void)add(u, v.t); break;
      case 1: (void)sum(u); break;
      case 2: (void)u.reshape({1}); break;
      case 3: (void)matmul(v.t, u); break;
      case 4: (void)cast(u, DType::float64); break;
      case 5: (void)clone(u); break;
      case 6: (void)relu(u); break;
      case 7: (void)u.item<float>(); break;
      case 8: {
        Tensor w = v.t;  // copy_ of an undefined source is refused before anything is written
        w.copy_(u);
        break;
      }
      default: (void)u.to(Device::cpu());
    }
  });
}

}  // namespace
}  // namespace gen

const std::vector<OpGen>& generators() {
  using namespace gen;
  static const std::vector<OpGen> table = {
      {"fill", 6, true, g_fill},
      {"arange", 3, true, g_arange},
      {"random", 3, false, g_random},
      {"random_traced", 3, true, g_random_traced, true},
      {"from_vector", 4, true, g_from_vector},
      {"clone_cast", 5, true, g_clone_cast},
      {"binary", 14, true, g_binary},
      {"scalar", 10, true, g_scalar},
      {"unary", 8, true, g_unary},
      {"reduce", 9, true, g_reduce},
      {"sum_to", 2, true, g_sum_to},
      {"view", 8, true, g_view},
      {"transpose", 3, true, g_transpose},
      {"matmul", 6, true, g_matmul},
      {"linear", 3, true, g_linear},
      {"softmax", 3, true, g_softmax},
      {"inplace", 9, true, g_inplace},
      {"read", 5, true, g_read},
      {"to_device", 3, false, g_to_device},
      {"grad_misuse", 3, false, g_grad_misuse},
      {"undefined", 2, true, g_undefined},
  };
  return table;
}

namespace {
// Stream i of device d: 0 is the default stream; 1 and 2 are made once per process (the
// engine keeps streams for its lifetime).
Stream case_stream(Device d, int i) {
  static std::map<std::string, std::vector<Stream>> streams;
  std::vector<Stream>& s = streams[d.str()];
  if (s.empty()) s = {Stream::default_stream(d), Stream::create(d), Stream::create(d)};
  return s[size_t(i)];
}
}  // namespace

void random_step(Case& c) {
  std::optional<StreamGuard> on;
  if (c.multi_stream && !c.traced) {
    const int i = int(c.uniform(0, 2));
    c.note("# on stream " + std::to_string(i) + " of " + c.device.str());
    on.emplace(case_stream(c.device, i));
  }
  const auto usable = [&](const OpGen& g) {
    return c.traced ? g.traceable && (!g.only_traced || c.traced_generator) : !g.only_traced;
  };
  int total = 0;
  for (const OpGen& g : generators())
    if (usable(g)) total += g.weight;
  int64_t k = c.uniform(0, total - 1);
  for (const OpGen& g : generators()) {
    if (!usable(g)) continue;
    if ((k -= g.weight) < 0) {
      g.run(c);
      return;
    }
  }
}

}  // namespace tide::api
