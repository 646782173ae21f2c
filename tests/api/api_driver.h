// The random API driver's case: a seeded sequence of public API calls on a pool of live
// tensors, each paired with its reference (api_ref.h). Every call must either return a
// result that matches the reference or, when the driver built it invalid on purpose,
// throw tide::Error at the call. Anything else (another exception type, a value outside
// the tolerance, a metadata mismatch, an error at a later sync) fails the case, with the
// seed, the case index and the calls so far, so that
//   TIDE_API_SEED=<seed> TIDE_API_CASE=<i> tide_api_tests --gtest_filter=<test>
// replays exactly that case and prints its calls.
//
// Environment: TIDE_API_SEED (default kDefaultSeed), TIDE_API_CASE (run one case, print
// its calls), TIDE_API_CASES (total cases over the suite, default kDefaultCases, split in
// the suite's proportions: raise it for a soak).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/api/api_ref.h"
#include "tide.h"

namespace tide::api {

inline constexpr uint64_t kDefaultSeed = 20261122;
inline constexpr int64_t kDefaultCases = 5000;
// The fake GPU of this suite (tests/fake_gpu.h; suites use indices 8 and up), and an index
// no fake is installed at (moving there must throw tide::Error).
inline constexpr int kFakeGpu = 8;
inline constexpr int kMissingGpu = 13;

struct Val {
  Tensor t;
  Ref r;
  std::string name;  // "v3", as in the call log
  bool requires_grad = false;
  bool leaf = true;     // no autograd node (is_leaf())
  bool frozen = false;  // a trace argument or a view of one: never written in place
};

// Thrown by Case::fail once the failure is recorded: unwinds the case.
struct CaseFailed {};

// Counts over one test, printed at its end (skipped: calls left out, by input class).
struct Stats {
  int64_t cases = 0, calls = 0, invalid = 0, checks = 0;
  int64_t elements = 0, unchecked = 0;  // elements compared; of those, ones kAny left open
  std::map<std::string, int64_t> skipped;
};
Stats& stats();

// How a call must end.
enum class Outcome {
  value,   // returns; its result is checked against the reference
  error,   // throws tide::Error at the call
  either,  // either of those (an input class whose fixed behaviour is not settled yet)
};

class Case {
 public:
  Case(std::string test, uint64_t seed, int64_t index);

  // ---- randomness ------------------------------------------------------------------
  std::mt19937_64 rng;
  int64_t uniform(int64_t lo, int64_t hi);  // inclusive
  double real(double lo, double hi);
  bool chance(double p);
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[size_t(uniform(0, int64_t(v.size()) - 1))];
  }

  // ---- what the case runs on ---------------------------------------------------------
  Device device = Device::cpu();  // where fresh tensors are made
  bool traced = false;            // inside a trace::function body: no host reads, and
                                  // rand/randn only from traced_generator (the caller
                                  // seeds it alike for the eager and the traced run)
  Generator* traced_generator = nullptr;
  bool sync_mode = false;       // the case runs under SynchronousGuard
  uint64_t inflight_bound = 0;  // set_max_inflight_ops for the case (0: none)
  bool multi_stream = false;    // each step on one of three streams of `device`
  bool has_fake_gpu() const;

  // ---- the pool ----------------------------------------------------------------------
  std::vector<Val> pool;     // live values generators draw operands from
  std::vector<Val> results;  // every valid result, checked again at the end
  // A random pool value for which pred holds, or nullptr.
  const Val* pick_val(const std::function<bool(const Val&)>& pred = {});
  // The name the next result will get ("v7").
  std::string next_name() const;
  // Checks t's shape, dtype and device against r (no wait), names it and pools it.
  const Val& add(const Tensor& t, Ref r, Device device, bool requires_grad = false,
                 bool leaf = true, bool frozen = false);
  // "v3(2, 3)float32" for the log.
  static std::string d(const Val& v);

  // ---- calls -------------------------------------------------------------------------
  // Logs `text` and runs f. `invalid` is empty for a valid call, which must return; else
  // it says why tide must throw tide::Error at the call. Returns whether f returned.
  template <class F>
  bool call(const std::string& text, const std::string& invalid, F&& f) {
    return call(text, invalid.empty() ? Outcome::value : Outcome::error, invalid, f);
  }
  template <class F>
  bool call(const std::string& text, Outcome want, const std::string& why, F&& f) {
    if (want == Outcome::value) note(text);
    if (want == Outcome::error) note(text + "   # invalid: " + why);
    if (want == Outcome::either) note(text + "   # tide::Error or a result: " + why);
    ++stats().calls;
    if (want == Outcome::error) ++stats().invalid;
    const uint64_t queued = want == Outcome::error ? Engine::get().stats().queued : 0;
    try {
      f();
    } catch (const Error& e) {
      if (want == Outcome::value) fail(std::string("unexpected tide::Error: ") + e.what());
      refused(e, want == Outcome::error ? queued : Engine::get().stats().queued);
      return false;
    } catch (const CaseFailed&) {
      throw;
    } catch (const std::exception& e) {
      fail(std::string("threw a non-tide exception: ") + e.what());
    } catch (...) {
      fail("threw something that is not a std::exception");
    }
    if (want == Outcome::error) fail("expected tide::Error (" + why + "), the call returned");
    return true;
  }
  // Checks a refusal: "[op] message", thrown before anything was queued (README, Errors).
  void refused(const Error& e, uint64_t queued_before);
  // Logs that a call of input class `klass` was left out (see KnownDefects in
  // api_generators.h) and counts it.
  void skip(const std::string& klass, const std::string& call_text);
  // Appends a line to the call log.
  void note(const std::string& line);
  // Reads v back (a sync) and compares it with its reference.
  void check(const Val& v, double extra_rel = 0);
  // Reads every result back, then wait_all(), which must not throw: valid calls leave no
  // failure behind.
  void check_all();
  [[noreturn]] void fail(const std::string& what);

  // ---- reporting ---------------------------------------------------------------------
  std::string report() const;  // the failure, the case's settings, the calls, how to replay
  const std::string& log() const { return log_; }
  const std::string& failure() const { return failure_; }

 private:
  std::string test_;
  uint64_t seed_;
  int64_t index_;
  int names_ = 0;
  std::string log_, failure_;
};

// The suite's settings from the environment (see the top of this file).
struct Settings {
  uint64_t seed = kDefaultSeed;
  int64_t only_case = -1;  // TIDE_API_CASE
  int64_t total = kDefaultCases;
};
Settings settings();

// Runs `share` (a fraction of TIDE_API_CASES) cases of `body` (or only TIDE_API_CASE),
// each with a fresh Case under its engine settings; reports failing cases (at most 5) with
// ADD_FAILURE. Returns the number of cases run.
int64_t run_cases(const std::string& test, double share, const std::function<void(Case&)>& body);

}  // namespace tide::api
