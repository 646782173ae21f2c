// The seeded random API driver: random sequences of public tide calls, each
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
//                   trace becomes a CUDA graph on the recording fake). The program may be
//                   a trace::loop body (int or tensor count), write the arguments in place,
//                   draw random numbers, or end in backward to a parameter (TracedSetup).
//   AutogradGraphs  in test_api_autograd.cpp.
//
// Input classes behind known defects are left out, logged and counted (KnownDefects in
// api_generators.h lists them); each test prints how many calls it left out.
// Not covered here: several frontend threads, the nn and train layers, real GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

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
// seed, over a pool of the two arguments and a parameter it reads by reference (which may
// require grad). With a generator, it may draw random numbers from it. The arguments are
// frozen unless `writes_args`, the parameter unless `writes_param` (then the program may
// write them, or views of them, in place). The same seed, variant, shapes and dtypes give
// the same calls, traced or eager. Returns its last (up to 3) results, or x.
std::vector<Val> body_program(Case& b, const Val& x, const Val& y, const Val& param, int steps,
                              bool writes_args, bool writes_param, Generator* generator) {
  b.traced = true;
  b.traced_generator = generator;
  b.device = x.t.device();
  b.add(x.t, x.r, b.device, false, true, !writes_args);
  b.add(y.t, y.r, b.device, false, true, !writes_args);
  b.add(param.t, param.r, b.device, param.requires_grad, true, !writes_param);
  b.results.clear();  // the inputs are checked by the caller
  for (int i = 0; i < steps; ++i) random_step(b);
  std::vector<Val> out;
  for (size_t i = b.results.size() > 3 ? b.results.size() - 3 : 0; i < b.results.size(); ++i)
    out.push_back(b.results[i]);
  if (out.empty()) out.push_back(x);
  return out;
}

// v in a fresh tensor with a fresh reference store (what the eager run of a call that
// writes its arguments runs on).
Val deep_copy(const Val& v) {
  Val w = v;
  w.t = clone(v.t);
  w.r = map1(v.r, v.r.dtype, [](El e) { return e; });
  return w;
}

// The exact reference of what t holds now (a sync).
Ref exact_ref(const Tensor& t) { return from_values(t.to_vector<double>(), t.shape(), t.dtype()); }

// A copy of the parameter p and of its reference (exact: what p holds now), to put back with
// restore. Outside autograd: p may be a leaf that requires grad.
Val snapshot(const Val& p, bool exact) {
  NoGrad no_grad;
  Val s = deep_copy(p);
  if (exact) s.r = exact_ref(p.t);
  return s;
}
void restore(Val& p, const Val& s) {
  NoGrad no_grad;
  p.t.copy_(s.t);
  for (int64_t i = 0; i < p.r.numel(); ++i) p.r.set(i, s.r.at(i));
}

// Stream t (1, 2) of device d for the threads of a traced case, made once per process (the
// engine keeps streams for its lifetime).
Stream thread_stream(Device d, int t) {
  static std::mutex mu;
  static std::map<std::string, std::vector<Stream>> streams;
  std::lock_guard lock(mu);
  std::vector<Stream>& s = streams[d.str()];
  while (int(s.size()) < t) s.push_back(Stream::create(d));
  return s[size_t(t - 1)];
}

// How a case's traced function is built. `in_loop`: the program is the body of a
// trace::loop over x (the loop state) run `count` times, an int or a tensor argument read
// on the device; the loop's result is the function's. The next state is the state halved
// plus the program's last result of the state's shape and dtype (else plus 1), so every
// iteration depends on the one before. `backward` (not in a loop): the parameter requires
// grad; the function resets its gradient, runs the program, calls backward on the sum of
// the parameter and of the results that require grad, and returns the gradient too (the
// trainer's step, in small).
struct TracedSetup {
  bool in_loop = false, tensor_count = false, writes_args = false, backward = false;
  bool random = false;        // the program draws from a generator, seeded alike for both runs
  bool writes_param = false;  // the program may write the captured parameter in place
  int threads = 0;            // then this many threads call f at once, each with its arguments
  DType count_dtype = DType::int64;
  std::string str() const {
    return std::string(in_loop ? (tensor_count ? ", in a loop with a tensor count (" +
                                                     std::string(name(count_dtype)) + ")"
                                               : ", in a loop with an int count")
                               : "") +
           (writes_args ? ", may write its arguments" : "") +
           (backward ? ", backward to the parameter" : "") + (random ? ", random ops" : "") +
           (writes_param ? ", may write the parameter" : "") +
           (threads ? ", then " + std::to_string(threads) + " threads" : "");
  }
};

void traced_case(Case& c) {
  // The case's device: the CPU, or the suite's fake GPU, whose traces become CUDA graphs
  // (drawn more often here than for the other tests: their code is larger).
  if (c.chance(0.3)) c.device = Device::cuda(kFakeGpu);
  const uint64_t body_seed = c.rng();
  const int steps = int(c.uniform(2, 8));
  trace::Options o;
  o.name = "api";
  o.fusion = c.chance(0.5) ? trace::Fusion::elementwise : trace::Fusion::none;
  o.streams = c.chance(0.3) ? 2 : 1;
  o.verify = c.chance(0.1);
  o.warmup_calls = c.chance(0.2) ? 1 : 0;
  // A small signature cache evicts and traces again: on a GPU, from the evicted graph's
  // exec (an update in place) where the topology allows.
  if (c.chance(0.3)) o.cache_budget = size_t(c.uniform(1, 2));
  TracedSetup setup;
  setup.in_loop = c.chance(0.3);
  setup.tensor_count = setup.in_loop && c.chance(0.5);
  setup.count_dtype = c.pick(std::vector<DType>{DType::int32, DType::int64, DType::float32});
  setup.writes_args = c.chance(0.25);
  setup.backward = !setup.in_loop && c.chance(0.3);
  setup.random = c.chance(0.5);
  setup.writes_param = c.chance(0.25);
  // Threads share nothing the function writes: no generator, parameter or gradient.
  if (!setup.random && !setup.writes_param && !setup.backward && c.chance(0.4))
    setup.threads = int(c.uniform(2, 3));
  Generator gen;
  c.note("# trace::function over a program of " + std::to_string(steps) + " calls, seed " +
         std::to_string(body_seed) + ", fusion " +
         (o.fusion == trace::Fusion::none ? "none" : "elementwise") + ", streams " +
         std::to_string(o.streams) + ", verify " + (o.verify ? "on" : "off") + ", warmup " +
         std::to_string(o.warmup_calls) + ", cache " + std::to_string(o.cache_budget) +
         setup.str());
  const Shape sx = random_shape(c, 24, 3), sy = random_shape(c, 24, 3);
  const DType tx = random_floating(c), ty = random_floating(c);
  Val param = make_val(c, random_shape(c, 24, 3), random_floating(c));
  if (setup.backward) {
    param.t.requires_grad_();
    param.requires_grad = true;
  }
  Val cur_x, cur_y;    // the arguments of the call under way, with their references
  bool eager = false;  // the body runs as the eager reference (it may read values back)
  std::string body_failure;
  // One run of the program; in the eager reference, checked against its references.
  const auto program = [&](const Val& x, const Val& y, int variant) {
    Case b("traced body", body_seed, variant);
    try {
      std::vector<Val> out = body_program(b, x, y, param, steps, setup.writes_args,
                                          setup.writes_param, setup.random ? &gen : nullptr);
      // (An eager loop with a tensor count of 0 records its body once, to learn its
      // generator: nothing is read back then.)
      if (eager && !tide::detail::capturing()) b.check_all();
      return out;
    } catch (const CaseFailed&) {
      body_failure =
          std::string(eager ? "in the eager run of the body: " : "in the traced body: ") +
          b.failure() + "\nbody calls:\n" + b.log();
      throw;
    }
  };
  // The function, traced and (on copies of the arguments) as the eager reference.
  const auto fn = [&](const Tensor& x, const Tensor& y, const Tensor& n, int variant,
                      int count) -> std::vector<Tensor> {
    std::vector<Tensor> out;
    if (setup.backward) {
      param.t.zero_grad();
      Tensor loss = cast(sum(param.t), DType::float64);
      for (const Val& v : program({x, cur_x.r, "x"}, {y, cur_y.r, "y"}, variant)) {
        out.push_back(v.t);
        if (v.t.requires_grad()) loss = loss + cast(sum(v.t), DType::float64);
      }
      loss.backward();
      out.push_back(param.t.grad());
      return out;
    }
    if (!setup.in_loop) {
      for (const Val& v : program({x, cur_x.r, "x"}, {y, cur_y.r, "y"}, variant))
        out.push_back(v.t);
      return out;
    }
    const auto body = [&](const Tensor& s) {
      // The state's reference: its values when the loop runs eagerly (the reference, a
      // warm-up call); while a trace records, which reads nothing and chooses nothing by
      // value, zeros of its shape and dtype.
      const bool recording = tide::detail::capturing() != nullptr;
      const Ref sr = recording ? fresh(s.shape(), s.dtype()) : exact_ref(s);
      Tensor last;
      for (const Val& v : program({s, sr, "s"}, {y, cur_y.r, "y"}, variant))
        if (v.t.shape() == s.shape() && v.t.dtype() == s.dtype()) last = v.t;
      return last.defined() ? s * 0.5 + last : s * 0.5 + 1.0;
    };
    if (setup.tensor_count) return {trace::loop(n, body, x)};
    return {trace::loop(int64_t(count), body, x)};
  };
  auto f = trace::function(fn, o);

  // Calls: two argument sets of one signature, the first again, then a new variant (a
  // non-tensor argument: traces again), sometimes a new shape. Loops run 0..4 times: an int
  // count is part of the signature, a tensor count is not.
  struct CallArgs {
    Val x, y;
    int variant;
    int count = 0;
  };
  // A call's signature as the cache keys it (an int count is part of it).
  const auto key_of = [&](const CallArgs& a) {
    return a.x.r.shape.str() + a.y.r.shape.str() + std::to_string(a.variant) +
           (setup.in_loop && !setup.tensor_count ? "n" + std::to_string(a.count) : "");
  };
  // Fused kernels apply the same functors, within trace::fusion_tolerance of eager.
  const bool fused = o.fusion != trace::Fusion::none;
  const auto tol = [&](DType t) { return fused ? (t == DType::float32 ? 4e-6 : 1e-13) : 0.0; };
  std::vector<CallArgs> calls;
  Val x1 = make_val(c, sx, tx), y1 = make_val(c, sy, ty);
  calls.push_back({x1, y1, 0});
  calls.push_back({make_val(c, sx, tx), make_val(c, sy, ty), 0});
  calls.push_back({x1, y1, 0});
  calls.push_back({x1, y1, 1});
  if (c.chance(0.5)) calls.push_back({make_val(c, random_shape(c, 24, 3), tx), y1, 0});
  for (CallArgs& a : calls) a.count = setup.in_loop ? int(c.uniform(0, 4)) : 0;
  std::vector<std::string> call_keys;  // the signature of every call, in order
  for (size_t k = 0; k < calls.size(); ++k) {
    CallArgs& a = calls[k];
    if (k == 2) {  // the parameter is read by reference: a replay sees this write
      Tensor one = ones(param.r.shape, param.r.dtype, param.t.device());
      c.call(Case::d(param) + ".add_(ones)", "", [&] {
        NoGrad no_grad;  // a leaf that may require grad
        param.t.add_(one);
      });
      Ref now = map2(param.r,
                     from_values(std::vector<double>(size_t(param.r.numel()), 1.0), param.r.shape,
                                 param.r.dtype),
                     param.r.shape, param.r.dtype,
                     [&](El p, El q) { return rule_add(p, q, param.r.dtype); });
      for (int64_t i = 0; i < now.numel(); ++i) param.r.set(i, now.at(i));
    }
    const Tensor n = from_data({double(a.count)}, Shape{}, setup.count_dtype, c.device);
    // The reference: the same function run eagerly, on copies of the arguments when it
    // may write them. Its program's results are checked against the double-precision
    // references; in a loop only the iterations are (the loop's result is compared with
    // eager's below).
    const Val ex = setup.writes_args ? deep_copy(a.x) : a.x;
    const Val ey = setup.writes_args ? deep_copy(a.y) : a.y;
    const int int_count = setup.tensor_count ? 0 : a.count;  // in the signature
    std::vector<Val> want;
    body_failure.clear();
    // A program that may write the parameter runs both times from the same parameter: the
    // eager run's result is kept, the parameter put back, and the call must leave it so.
    Val param_before, param_after;
    if (setup.writes_param) param_before = snapshot(param, false);
    const uint64_t seed = c.rng();  // the same numbers for the eager run and the call
    gen.manual_seed(seed);
    eager = true;
    try {
      cur_x = ex;
      cur_y = ey;
      if (setup.in_loop || setup.backward) {
        for (Tensor& t : fn(ex.t, ey.t, n, a.variant, int_count))
          want.push_back({t, exact_ref(t), "eager"});
      } else {
        Case e("traced body", body_seed, a.variant);
        want = body_program(e, ex, ey, param, steps, setup.writes_args, setup.writes_param,
                            setup.random ? &gen : nullptr);
        e.check_all();
        body_failure = "";
        if (k == 0 || k == 3) c.note("# the body program (eager run):\n" + e.log());
      }
    } catch (const CaseFailed&) {
      eager = false;
      c.fail(body_failure.empty() ? "in the eager run of the body" : body_failure);
    } catch (const Error& e) {
      eager = false;
      c.fail(std::string("the eager run threw: ") + e.what() + "\n" + body_failure);
    }
    eager = false;
    body_failure.clear();
    // What the outputs must hold now, in stores of their own: a view of the parameter
    // shares its store, which is put back below.
    for (Val& w : want) w.r = map1(w.r, w.r.dtype, [](El e) { return e; });
    if (setup.writes_param) {
      param_after = snapshot(param, setup.in_loop || setup.backward);
      restore(param, param_before);
    }
    cur_x = a.x;
    cur_y = a.y;
    std::vector<Tensor> got;
    const std::string text = "outs = f(" + Case::d(a.x) + ", " + Case::d(a.y) +
                             ", n = " + std::to_string(a.count) + ", " + std::to_string(a.variant) +
                             ")";
    gen.manual_seed(seed);
    try {
      c.call(text, "", [&] { got = f(a.x.t, a.y.t, n, a.variant, int_count); });
    } catch (const CaseFailed&) {
      if (!body_failure.empty()) c.fail(body_failure);
      throw;
    }
    call_keys.push_back(key_of(a));
    if (got.size() != want.size())
      c.fail(text + " returned " + std::to_string(got.size()) + " tensors, the eager run " +
             std::to_string(want.size()));
    for (size_t j = 0; j < got.size(); ++j) {
      Val v = want[j];
      v.t = got[j];
      v.name = "outs[" + std::to_string(j) + "]";
      if (got[j].shape() != v.r.shape || got[j].dtype() != v.r.dtype)
        c.fail(v.name + " is " + got[j].shape().str() + " " + std::string(name(got[j].dtype())) +
               ", eager gave " + v.r.shape.str() + " " + std::string(name(v.r.dtype)));
      c.check(v, tol(v.r.dtype));
    }
    // Arguments the function wrote hold what the eager run left in its copies; their
    // references follow, for the calls after this one.
    if (setup.writes_args)
      for (auto [arg, copy, what] : {std::tuple{&a.x, &ex, "x"}, std::tuple{&a.y, &ey, "y"}}) {
        Val v = *arg;
        v.r = setup.in_loop || setup.backward ? exact_ref(copy->t) : copy->r;
        v.name = std::string("argument ") + what + " after the call";
        c.check(v, tol(v.r.dtype));
        for (int64_t i = 0; i < v.r.numel(); ++i) arg->r.set(i, v.r.at(i));
      }
    if (setup.writes_param) {
      Val v = param;
      v.r = param_after.r;
      v.name = "the parameter after the call";
      c.check(v, tol(v.r.dtype));
      restore(param, param_after);
    }
  }
  if (setup.threads) {
    // Calls from several threads at once (each on a stream of its own but the first), each
    // with its arguments, of the first call's signature: traced before the threads start
    // (two calls: one may be a warm-up), so that they only replay. Each thread's calls must
    // give what the same calls give eagerly, one after the other.
    const CallArgs& a0 = calls[0];
    const int int_count = setup.tensor_count ? 0 : a0.count;
    const Tensor n = from_data({double(a0.count)}, Shape{}, setup.count_dtype, c.device);
    const std::string key = key_of(a0);
    for (int i = 0; i < 2; ++i) {  // on copies, which the case does not check at its end
      cur_x = deep_copy(a0.x);
      cur_y = deep_copy(a0.y);
      c.call("f(" + Case::d(cur_x) + ", " + Case::d(cur_y) + ", n = " + std::to_string(a0.count) +
                 ", 0)   # before the threads",
             "", [&] { (void)f(cur_x.t, cur_y.t, n, 0, int_count); });
      call_keys.push_back(key);
    }
    constexpr int kCalls = 3;
    struct Run {
      Val x, y, ex, ey;  // the arguments, and the eager run's copies of them
      std::vector<std::vector<Ref>> want;
      std::vector<std::vector<std::vector<double>>> got;
      std::vector<double> got_x, got_y;
      std::string error;
    };
    std::vector<Run> runs(size_t(setup.threads));
    for (Run& r : runs) {
      r.x = make_val(c, a0.x.r.shape, a0.x.r.dtype);
      r.y = make_val(c, a0.y.r.shape, a0.y.r.dtype);
      r.ex = deep_copy(r.x);
      r.ey = deep_copy(r.y);
      eager = true;
      cur_x = r.ex;
      cur_y = r.ey;
      try {
        for (int m = 0; m < kCalls; ++m) {
          std::vector<Ref> w;
          for (const Tensor& t : fn(r.ex.t, r.ey.t, n, 0, int_count)) w.push_back(exact_ref(t));
          r.want.push_back(std::move(w));
        }
      } catch (const CaseFailed&) {
        eager = false;
        c.fail(body_failure.empty() ? "in the eager run of the body" : body_failure);
      }
      eager = false;
    }
    c.note("# " + std::to_string(runs.size()) + " threads, each " + std::to_string(kCalls) +
           " calls of f on arguments of its own");
    std::vector<std::thread> pool;
    for (size_t t = 0; t < runs.size(); ++t)
      pool.emplace_back([&, t] {
        Run& r = runs[t];
        try {
          std::optional<StreamGuard> on;
          if (t > 0) on.emplace(thread_stream(c.device, int(t)));
          for (int m = 0; m < kCalls; ++m) {
            std::vector<std::vector<double>> g;
            for (const Tensor& o : f(r.x.t, r.y.t, n, 0, int_count))
              g.push_back(o.to_vector<double>());
            r.got.push_back(std::move(g));
          }
          r.got_x = r.x.t.to_vector<double>();
          r.got_y = r.y.t.to_vector<double>();
        } catch (const std::exception& e) {
          r.error = e.what();
        }
      });
    for (std::thread& t : pool) t.join();
    call_keys.insert(call_keys.end(), size_t(setup.threads * kCalls), key);
    for (size_t t = 0; t < runs.size(); ++t) {
      Run& r = runs[t];
      const std::string who = "thread " + std::to_string(t);
      if (!r.error.empty()) c.fail(who + " threw: " + r.error);
      for (int m = 0; m < kCalls; ++m) {
        if (r.got[size_t(m)].size() != r.want[size_t(m)].size())
          c.fail(who + ", call " + std::to_string(m) + ": " +
                 std::to_string(r.got[size_t(m)].size()) + " outputs, eager gave " +
                 std::to_string(r.want[size_t(m)].size()));
        for (size_t j = 0; j < r.got[size_t(m)].size(); ++j) {
          const Ref& w = r.want[size_t(m)][j];
          const std::string bad = mismatch(w, r.got[size_t(m)][j], tol(w.dtype));
          if (!bad.empty())
            c.fail(who + ", call " + std::to_string(m) + ": outs[" + std::to_string(j) +
                   "] differs from eager: " + bad);
        }
      }
      // The arguments hold what the eager calls left in the copies (read back for a loop,
      // whose references follow its recordings too); their references follow (the case
      // checks them at its end).
      for (auto [arg, got, copy, what] :
           {std::tuple{&r.x, &r.got_x, &r.ex, "x"}, std::tuple{&r.y, &r.got_y, &r.ey, "y"}}) {
        const Ref want = setup.in_loop ? exact_ref(copy->t) : copy->r;
        const std::string bad = mismatch(want, *got, tol(want.dtype));
        if (!bad.empty()) c.fail(who + ": argument " + what + " after its calls: " + bad);
        for (int64_t i = 0; i < arg->r.numel(); ++i) arg->r.set(i, want.at(i));
      }
    }
  }
  // The stats, from the calls' signatures through the signature cache (least recently
  // used evicted beyond the budget; a signature's warm-up calls counted once, evicted or
  // not).
  int64_t traces = 0, replays = 0, eager_calls = 0, evictions = 0;
  std::vector<std::string> cache;  // most recently used first
  std::map<std::string, int> warm;
  for (const std::string& key : call_keys) {
    auto hit = std::find(cache.begin(), cache.end(), key);
    if (hit != cache.end()) {
      cache.erase(hit);
      cache.insert(cache.begin(), key);
      ++replays;
    } else if (warm[key] < o.warmup_calls) {
      ++warm[key];
      ++eager_calls;
    } else {
      ++traces;
      ++replays;
      cache.insert(cache.begin(), key);
      if (cache.size() > o.cache_budget) {
        cache.pop_back();
        ++evictions;
      }
    }
  }
  const trace::FunctionStats s = f.stats();
  if (s.calls != int64_t(call_keys.size()) || s.traces != traces || s.replays != replays ||
      s.eager_calls != eager_calls || s.evictions != evictions)
    c.fail("stats: " + std::to_string(s.calls) + " calls, " + std::to_string(s.traces) +
           " traces, " + std::to_string(s.replays) + " replays, " + std::to_string(s.eager_calls) +
           " eager, " + std::to_string(s.evictions) + " evictions; expected " +
           std::to_string(call_keys.size()) + ", " + std::to_string(traces) + ", " +
           std::to_string(replays) + ", " + std::to_string(eager_calls) + ", " +
           std::to_string(evictions));
}

TEST(RandomApi, TracedFunctions) { run_cases("RandomApi.TracedFunctions", 0.05, traced_case); }

}  // namespace
}  // namespace tide::api
