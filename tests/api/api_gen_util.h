// Helpers shared by the generator files of the random API driver (api_generators.cpp,
// api_gen_creation.cpp): formatting for the call log, operand choice, pooling results
// with their autograd state, the known-defect gates and the one-tensor call runner.
// Internal to tests/api.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/api/api_generators.h"

namespace tide::api::gen {

constexpr int64_t P(int k) { return int64_t(1) << k; }

inline std::string fmt(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}
inline std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}
inline std::string dt(DType t) { return std::string(name(t)); }
inline std::string dev_text(Device d) { return d.str(); }
inline Device other_device(const Case& c) {
  return c.device.is_cpu() ? Device::cuda(kFakeGpu) : Device::cpu();
}
inline std::string d(const Val& v) { return v.t.defined() ? Case::d(v) : "Tensor()"; }

inline bool is_float(const Val& v) { return is_floating(v.r.dtype); }
inline bool writable(const Val& v) { return !v.frozen; }

// A pool value matching pred (three times in four, when there is one), else a fresh
// tensor of a random shape and of dtype t (random when unset).
inline Val operand(Case& c, const std::function<bool(const Val&)>& pred = {},
                   std::optional<DType> t = std::nullopt) {
  if (c.chance(0.75))
    if (const Val* v = c.pick_val(pred)) return *v;
  return make_val(c, random_shape(c), t ? *t : random_dtype(c));
}

// Pools the result of a valid call: it requires grad when the op records and an input
// does; a view of a trace argument stays frozen.
inline const Val& add_result(Case& c, const Tensor& y, Ref r, Device dev, bool records,
                             std::initializer_list<const Val*> inputs, bool is_view = false) {
  bool rg = false, frozen = false;
  for (const Val* v : inputs) {
    rg |= records && v->requires_grad;
    frozen |= is_view && v->frozen;
  }
  return c.add(y, std::move(r), dev, rg, !rg, frozen);
}

// Whether a call whose reference is r may run, and how it must end: integer results out
// of their dtype are a known-defect class (KnownDefects::integer_overflow).
inline std::optional<Outcome> gate_overflow(Case& c, Ref& r, const std::string& text) {
  if (is_floating(r.dtype) || all_fit(r)) return Outcome::value;
  if (!KnownDefects::integer_overflow) {
    c.skip("integer_overflow", text);
    return std::nullopt;
  }
  return Outcome::either;
}
inline std::optional<Outcome> gate_float_to_int(Case& c, bool out_of_range,
                                                const std::string& text) {
  if (!out_of_range) return Outcome::value;
  if (!KnownDefects::float_to_int_out_of_range) {
    c.skip("float_to_int_out_of_range", text);
    return std::nullopt;
  }
  return Outcome::either;
}

// Runs a call that gives one tensor: `want` says how it must end; a result is pooled with
// reference r (unchecked values for Outcome::either).
template <class F>
void run_op(Case& c, const std::string& text, Outcome want, const std::string& why, Ref r,
            Device dev, bool records, std::initializer_list<const Val*> inputs, F&& f,
            bool is_view = false) {
  Tensor y;
  if (!c.call(text, want, why, [&] { y = f(); })) return;
  if (want == Outcome::either)
    for (int64_t i = 0; i < r.numel(); ++i) r.set(i, {0, kAny});
  add_result(c, y, std::move(r), dev, records, inputs, is_view);
}

// The creation generators (api_gen_creation.cpp).
void g_fill(Case& c);
void g_arange(Case& c);
void g_random(Case& c);
void g_random_traced(Case& c);
void g_from_vector(Case& c);
void g_clone_cast(Case& c);

}  // namespace tide::api::gen
