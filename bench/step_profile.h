// Where a training step's time goes, from the profiler's per-op start/end on the worker:
// per step, the time inside a named set of "key" ops (the GEMMs, the convolutions), inside
// every other op, and the worker's idle gaps between ops (queue hand-offs, the frontend's
// sync). Shared by the MLP and CNN step profiles (bench_mlp.cpp, bench_cnn.cpp).
//
//   StepProfile prof({"matmul"});
//   for (auto _ : state) { prof.begin(); step(); tide::wait_all();
//   state.SetIterationTime(prof.end()); } prof.report(state, "gemm");  // counters gemm_ms,
//   gemm_ops, other_ms, other_ops, idle_ms
//
// The label names the costliest other ops. The profiler's own cost is in the times.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/profiler.h"

namespace tide_bench {

class StepProfile {
 public:
  explicit StepProfile(std::set<std::string> key_ops) : key_ops_(std::move(key_ops)) {}

  void begin() {
    tide::profiler::start();
    t0_ = std::chrono::steady_clock::now();
  }
  // Call after the step's wait_all(); returns the step's wall time in seconds.
  double end() {
    const auto t1 = std::chrono::steady_clock::now();
    tide::profiler::stop();
    std::vector<tide::profiler::OpRecord> ops = tide::profiler::ops();
    std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    for (size_t i = 0; i < ops.size(); ++i) {
      const double ms = 1e-6 * double(ops[i].end_ns - ops[i].start_ns);
      const bool key = key_ops_.count(ops[i].op) != 0;
      (key ? key_ms_ : other_ms_) += ms;
      (key ? key_count_ : other_count_) += 1;
      if (!key) by_op_[ops[i].op] += ms;
      if (i > 0)
        idle_ms_ += 1e-6 * double(std::max<int64_t>(0, ops[i].start_ns - ops[i - 1].end_ns));
    }
    return std::chrono::duration<double>(t1 - t0_).count();
  }
  // Per-step counters <key>_ms, <key>_ops, other_ms, other_ops, idle_ms and the label.
  void report(benchmark::State& state, const std::string& key) const {
    const double n = double(std::max<benchmark::IterationCount>(1, state.iterations()));
    state.counters[key + "_ms"] = key_ms_ / n;
    state.counters[key + "_ops"] = key_count_ / n;
    state.counters["other_ms"] = other_ms_ / n;
    state.counters["other_ops"] = other_count_ / n;
    state.counters["idle_ms"] = idle_ms_ / n;
    std::vector<std::pair<double, std::string>> top;
    for (auto& [op, ms] : by_op_) top.push_back({ms / n, op});
    std::sort(top.rbegin(), top.rend());
    std::string label;
    for (size_t i = 0; i < std::min<size_t>(6, top.size()); ++i)
      label += top[i].second + "=" + std::to_string(top[i].first).substr(0, 5) + "ms ";
    state.SetLabel(label);
  }

 private:
  std::set<std::string> key_ops_;
  std::chrono::steady_clock::time_point t0_;
  double key_ms_ = 0, other_ms_ = 0, idle_ms_ = 0, key_count_ = 0, other_count_ = 0;
  std::map<std::string, double> by_op_;
};

}  // namespace tide_bench
