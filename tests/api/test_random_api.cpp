// The seeded random API driver (issue 11): random sequences of public tide calls, each
// either checked against a double-precision reference or built invalid on purpose and
// required to throw tide::Error at the call. Run under ASan + UBSan in CI. A failure prints
// the seed, the case and its calls; TIDE_API_SEED / TIDE_API_CASE replay one case and
// TIDE_API_CASES raises the count for a soak (api_driver.h).
//
//   EagerSequences  3..12 calls of the generator table (api_generators.h) per case, on the
//                   CPU or the suite's fake GPU, some cases synchronous, on three streams
//                   or under a bound on inflight ops; every result is read back and
//                   checked again at the end, after the later calls (in-place writes
//                   through views included) ran.
//   TracedFunctions trace::function over a random program of traceable calls: every call
//                   (trace, replay, retrace, warm-up, verify, two streams, fusion) against
//                   the same program run eagerly, on the CPU or on the fake GPU (where the
//                   trace becomes a CUDA graph on the recording fake).
//   AutogradGraphs  in test_api_autograd.cpp.
//
// Input classes behind known defects are left out, logged and counted (KnownDefects in
// api_generators.h lists them); each test prints how many calls it left out.
// Not covered here: several frontend threads, the nn and train layers, real GPUs.
#include <gtest/gtest.h>

#include <map>

#include "tests/api/api_driver.h"
#include "tests/api/api_generators.h"
#include "tests/api/api_ops.h"

namespace tide::api {
namespace {

TEST(RandomApi, EagerSequences) {
  run_cases("RandomApi.EagerSequences", 0.75, [](Case& c) {
    const int64_t steps = c.uniform(3, 12);
    for (int64_t i = 0; i < steps; ++i) random_step(c);
  });
}

// ---- traced functions ----------------------------------------------------------------------

// The program a traced function runs: `steps` random traceable calls in a case of its own
// seed, over a pool of the two arguments and a parameter it reads by reference (all three
// frozen: the program writes only what it made). The same seed, variant, shapes and dtypes
// give the same calls, traced or eager. Returns its last (up to 3) results, or x.
std::vector<Val> body_program(Case& b, const Val& x, const Val& y, const Val& param, int steps) {
  b.traced = true;
  b.device = x.t.device();
  for (const Val* v : {&x, &y, &param}) b.add(v->t, v->r, b.device, false, true, true);
  b.results.clear();  // the inputs are checked by the caller
  for (int i = 0; i < steps; ++i) random_step(b);
  std::vector<Val> out;
  for (size_t i = b.results.size() > 3 ? b.results.size() - 3 : 0; i < b.results.size(); ++i)
    out.push_back(b.results[i]);
  if (out.empty()) out.push_back(x);
  return out;
}

void traced_case(Case& c) {
  // The case's device (the CPU, or the suite's fake GPU, whose traces become CUDA graphs).
  const uint64_t body_seed = c.rng();
  const int steps = int(c.uniform(2, 8));
  trace::Options o;
  o.name = "api";
  o.fusion = c.chance(0.5) ? trace::Fusion::elementwise : trace::Fusion::none;
  o.streams = c.chance(0.3) ? 2 : 1;
  o.verify = c.chance(0.1);
  o.warmup_calls = c.chance(0.2) ? 1 : 0;
  c.note("# trace::function over a program of " + std::to_string(steps) + " calls, seed " +
         std::to_string(body_seed) + ", fusion " +
         (o.fusion == trace::Fusion::none ? "none" : "elementwise") + ", streams " +
         std::to_string(o.streams) + ", verify " + (o.verify ? "on" : "off") + ", warmup " +
         std::to_string(o.warmup_calls));
  const Shape sx = random_shape(c, 24, 3), sy = random_shape(c, 24, 3);
  const DType tx = random_floating(c), ty = random_floating(c);
  Val param = make_val(c, random_shape(c, 24, 3), random_floating(c));
  Val cur_x, cur_y;  // the arguments of the call under way, with their references
  std::string body_failure;
  auto f = trace::function(
      [&](const Tensor& x, const Tensor& y, int variant) {
        Case b("traced body", body_seed, variant);
        std::vector<Tensor> out;
        try {
          for (const Val& v : body_program(b, {x, cur_x.r, "x"}, {y, cur_y.r, "y"}, param, steps))
            out.push_back(v.t);
        } catch (const CaseFailed&) {
          body_failure = "in the traced body: " + b.failure() + "\nbody calls:\n" + b.log();
          throw;
        }
        return out;
      },
      o);

  // Calls: two argument sets of one signature, the first again, then a new variant (a
  // non-tensor argument: traces again), sometimes a new shape.
  struct CallArgs {
    Val x, y;
    int variant;
  };
  std::vector<CallArgs> calls;
  Val x1 = make_val(c, sx, tx), y1 = make_val(c, sy, ty);
  calls.push_back({x1, y1, 0});
  calls.push_back({make_val(c, sx, tx), make_val(c, sy, ty), 0});
  calls.push_back({x1, y1, 0});
  calls.push_back({x1, y1, 1});
  if (c.chance(0.5)) calls.push_back({make_val(c, random_shape(c, 24, 3), tx), y1, 0});
  std::map<std::string, int> per_signature;
  for (size_t k = 0; k < calls.size(); ++k) {
    const CallArgs& a = calls[k];
    if (k == 2) {  // the parameter is read by reference: a replay sees this write
      Tensor one = ones(param.r.shape, param.r.dtype, param.t.device());
      c.call(Case::d(param) + ".add_(ones)", "", [&] { param.t.add_(one); });
      Ref now = map2(param.r,
                     from_values(std::vector<double>(size_t(param.r.numel()), 1.0), param.r.shape,
                                 param.r.dtype),
                     param.r.shape, param.r.dtype,
                     [&](El p, El q) { return rule_add(p, q, param.r.dtype); });
      for (int64_t i = 0; i < now.numel(); ++i) param.r.set(i, now.at(i));
    }
    // The reference: the same program, run eagerly on the same arguments.
    Case e("traced body", body_seed, a.variant);
    std::vector<Val> want;
    try {
      want = body_program(e, a.x, a.y, param, steps);
      e.check_all();
    } catch (const CaseFailed&) {
      c.fail("in the eager run of the body: " + e.failure() + "\nbody calls:\n" + e.log());
    }
    if (k == 0 || k == 3) c.note("# the body program (eager run):\n" + e.log());
    cur_x = a.x;
    cur_y = a.y;
    std::vector<Tensor> got;
    const std::string text =
        "outs = f(" + Case::d(a.x) + ", " + Case::d(a.y) + ", " + std::to_string(a.variant) + ")";
    try {
      c.call(text, "", [&] { got = f(a.x.t, a.y.t, a.variant); });
    } catch (const CaseFailed&) {
      if (!body_failure.empty()) c.fail(body_failure);
      throw;
    }
    ++per_signature[a.x.r.shape.str() + a.y.r.shape.str() + std::to_string(a.variant)];
    if (got.size() != want.size())
      c.fail(text + " returned " + std::to_string(got.size()) + " tensors, the eager run " +
             std::to_string(want.size()));
    // Fused kernels apply the same functors, within trace::fusion_tolerance of eager.
    const bool fused = o.fusion != trace::Fusion::none;
    for (size_t j = 0; j < got.size(); ++j) {
      Val v = want[j];
      v.t = got[j];
      v.name = "outs[" + std::to_string(j) + "]";
      if (got[j].shape() != v.r.shape || got[j].dtype() != v.r.dtype)
        c.fail(v.name + " is " + got[j].shape().str() + " " + std::string(name(got[j].dtype())) +
               ", eager gave " + v.r.shape.str() + " " + std::string(name(v.r.dtype)));
      c.check(v, fused ? (v.r.dtype == DType::float32 ? 4e-6 : 1e-13) : 0);
    }
  }
  int64_t traces = 0, replays = 0, eager = 0;
  for (const auto& [sig, n] : per_signature) {
    traces += n > o.warmup_calls;
    replays += std::max(0, n - o.warmup_calls);
    eager += std::min(n, o.warmup_calls);
  }
  const trace::FunctionStats s = f.stats();
  if (s.calls != int64_t(calls.size()) || s.traces != traces || s.replays != replays ||
      s.eager_calls != eager)
    c.fail("stats: " + std::to_string(s.calls) + " calls, " + std::to_string(s.traces) +
           " traces, " + std::to_string(s.replays) + " replays, " + std::to_string(s.eager_calls) +
           " eager; expected " + std::to_string(calls.size()) + ", " + std::to_string(traces) +
           ", " + std::to_string(replays) + ", " + std::to_string(eager));
}

TEST(RandomApi, TracedFunctions) { run_cases("RandomApi.TracedFunctions", 0.05, traced_case); }

}  // namespace
}  // namespace tide::api
