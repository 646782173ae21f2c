// The random API driver's case and case loop: see api_driver.h.
#include "tests/api/api_driver.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "fake_gpu.h"

namespace tide::api {

Case::Case(std::string test, uint64_t seed, int64_t index)
    : test_(std::move(test)), seed_(seed), index_(index) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the test name: each test its own stream
  for (char ch : test_) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  std::seed_seq seq{uint32_t(seed),        uint32_t(seed >> 32), uint32_t(index),
                    uint32_t(index >> 32), uint32_t(h),          uint32_t(h >> 32)};
  rng.seed(seq);
}

int64_t Case::uniform(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
double Case::real(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
bool Case::chance(double p) { return std::bernoulli_distribution(p)(rng); }

bool Case::has_fake_gpu() const { return true; }  // run_cases installs it first

const Val* Case::pick_val(const std::function<bool(const Val&)>& pred) {
  std::vector<const Val*> ok;
  for (const Val& v : pool)
    if (!pred || pred(v)) ok.push_back(&v);
  if (ok.empty()) return nullptr;
  return ok[size_t(uniform(0, int64_t(ok.size()) - 1))];
}

std::string Case::next_name() const { return (traced ? "t" : "v") + std::to_string(names_); }

std::string Case::d(const Val& v) {
  return v.name + v.t.shape().str() + std::string(name(v.t.dtype())) +
         (v.t.device().is_cpu() ? "" : "@" + v.t.device().str());
}

const Val& Case::add(const Tensor& t, Ref r, Device dev, bool requires_grad, bool leaf,
                     bool frozen) {
  const std::string n = next_name();
  if (!t.defined()) fail(n + ": the call returned an undefined tensor");
  if (t.shape() != r.shape || t.dtype() != r.dtype || t.device() != dev)
    fail(n + ": got " + t.shape().str() + " " + std::string(name(t.dtype())) + " on " +
         t.device().str() + ", expected " + r.shape.str() + " " + std::string(name(r.dtype)) +
         " on " + dev.str());
  if (t.requires_grad() != requires_grad)
    fail(n + ": requires_grad() is " + (t.requires_grad() ? "true" : "false") + ", expected " +
         (requires_grad ? "true" : "false"));
  if (t.is_leaf() != leaf) fail(n + ": is_leaf() differs from the model");
  ++names_;
  Val v{t, std::move(r), n, requires_grad, leaf, frozen};
  results.push_back(v);
  // A small pool keeps operands meeting each other; older values are still checked.
  if (pool.size() >= 8) pool.erase(pool.begin() + uniform(0, 7));
  pool.push_back(std::move(v));
  return pool.back();
}

void Case::note(const std::string& line) { log_ += "  " + line + "\n"; }

void Case::refused(const Error& e, uint64_t queued_before) {
  const std::string w = e.what();
  if (w.empty() || w[0] != '[' || e.op().empty() || w.compare(1, e.op().size(), e.op()) != 0)
    fail("a tide::Error without its \"[op] \" prefix: '" + w + "'");
  if (Engine::get().stats().queued != queued_before)
    fail("the refused call queued work before it threw: " + w);
}

void Case::skip(const std::string& klass, const std::string& call_text) {
  note("# skipped (" + klass + "): " + call_text);
  ++stats().skipped[klass];
}

Stats& stats() {
  static Stats s;
  return s;
}

void Case::check(const Val& v, double extra_rel) {
  ++stats().checks;
  std::vector<double> got;
  try {
    got = v.t.to_vector<double>();
  } catch (const Error& e) {
    fail(v.name + ": reading it back threw: " + e.what());
  } catch (const std::exception& e) {
    fail(v.name + ": reading it back threw a non-tide exception: " + e.what());
  }
  stats().elements += v.r.numel();
  for (int64_t i = 0; i < v.r.numel(); ++i) stats().unchecked += !(v.r.at(i).tol < kAny);
  std::string m = mismatch(v.r, got, extra_rel);
  if (!m.empty())
    fail(v.name + " " + v.r.shape.str() + " " + std::string(name(v.r.dtype)) +
         " has wrong values: " + m + "; got " + preview(got, 12) + ", reference " +
         preview(v.r.values(), 12));
}

void Case::check_all() {
  note("# check every result, then wait_all()");
  for (const Val& v : results) check(v);
  try {
    wait_all();
  } catch (const std::exception& e) {
    fail(std::string("wait_all() rethrew a failure no call should have left: ") + e.what());
  }
}

void Case::fail(const std::string& what) {
  failure_ = what;
  throw CaseFailed{};
}

std::string Case::report() const {
  std::string s = "random API case failed: " + failure_ + "\n";
  s += "  case " + std::to_string(index_) + " of seed " + std::to_string(seed_) + " (device " +
       device.str() + (sync_mode ? ", synchronous" : "") +
       (inflight_bound ? ", max_inflight_ops " + std::to_string(inflight_bound) : "") +
       (multi_stream ? ", three streams" : "") + ")\n";
  s += "calls:\n" + log_;
  s += "replay: TIDE_API_SEED=" + std::to_string(seed_) +
       " TIDE_API_CASE=" + std::to_string(index_) + " tide_api_tests --gtest_filter='*" + test_ +
       "'\n";
  return s;
}

namespace {
int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 0);
  if (*end) {
    ADD_FAILURE() << name << "=" << v << " is not a number";
    return fallback;
  }
  return x;
}
}  // namespace

Settings settings() {
  Settings s;
  s.seed = uint64_t(env_int("TIDE_API_SEED", int64_t(kDefaultSeed)));
  s.only_case = env_int("TIDE_API_CASE", -1);
  s.total = env_int("TIDE_API_CASES", kDefaultCases);
  return s;
}

int64_t run_cases(const std::string& test, double share, const std::function<void(Case&)>& body) {
  const Settings s = settings();
  test_util::fake_gpu(kFakeGpu);
  const int64_t n =
      s.only_case >= 0 ? 1 : std::max<int64_t>(1, std::llround(double(s.total) * share));
  stats() = Stats{};
  int failures = 0;
  const auto summary = [&] {
    const Stats& st = stats();
    std::cout << "[random API] " << test << ": " << st.cases << " cases of seed " << s.seed << ", "
              << st.calls << " calls (" << st.invalid << " invalid on purpose), " << st.checks
              << " tensors read back and checked (" << st.elements << " elements, " << st.unchecked
              << " of them left open by the tolerances)";
    for (const auto& [klass, count] : st.skipped)
      std::cout << "; left out " << count << " calls of known-defect class " << klass;
    std::cout << std::endl;
  };
  for (int64_t i = 0; i < n; ++i) {
    ++stats().cases;
    Case c(test, s.seed, s.only_case >= 0 ? s.only_case : i);
    c.device = c.chance(0.2) ? Device::cuda(kFakeGpu) : Device::cpu();
    c.sync_mode = c.chance(0.1);
    c.inflight_bound = c.chance(0.05) ? uint64_t(c.uniform(1, 3)) : 0;
    c.multi_stream = c.chance(0.15);
    bool failed = false;
    {
      std::optional<SynchronousGuard> sync;
      if (c.sync_mode) sync.emplace(true);
      Engine::get().set_max_inflight_ops(c.inflight_bound);
      try {
        body(c);
        c.check_all();
      } catch (const CaseFailed&) {
        failed = true;
      } catch (const std::exception& e) {
        // Outside any call(): a bug of the driver, or tide throwing from a place no call
        // covers. Reported the same way.
        try {
          c.fail(std::string("escaped the driver: ") + e.what());
        } catch (const CaseFailed&) {
          failed = true;
        }
      }
      Engine::get().set_max_inflight_ops(0);
    }
    if (s.only_case >= 0) std::cout << "calls of case " << s.only_case << ":\n" << c.log();
    if (!failed) continue;
    ADD_FAILURE() << c.report();
    try {
      wait_all();  // what the failed case left must not be blamed on the next one
    } catch (const std::exception&) {
    }
    if (++failures >= 5) {
      ADD_FAILURE() << "stopping " << test << " after 5 failing cases";
      break;
    }
  }
  summary();
  return stats().cases;
}

}  // namespace tide::api
