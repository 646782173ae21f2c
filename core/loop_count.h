// A counted loop's count and conditions, one definition for every place that runs a loop:
// the CPU loop node (trace/loop.cpp), a fused loop's kernels (ops/fused_chain.h), the CUDA
// loop kernels (core/cuda/graph_loop.cu) and the recording fake that stands in for them
// (core/cuda/fake_graph.cpp). So the fake's tests check the rule the device runs. The
// compiled chains' CUDA source writes the same read out as text (ops/chain_source.cpp),
// checked against this one by tests/ops/test_chain_source_host.cpp.
#pragma once

#include <cstdint>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>

#include "core/dtype.h"
#include "core/host_device.h"

namespace tide {

// A float count: truncated toward zero. NaN, an infinity and a value outside int64's range
// read as kInvalidLoopCount, a negative count, on every device alike (a plain conversion
// is undefined there: x86 gives INT64_MIN, a GPU saturates, and a count of 1e30 would
// loop for ever on the GPU alone).
inline constexpr int64_t kInvalidLoopCount = INT64_MIN;
TIDE_HOST_DEVICE int64_t loop_count_of_real(double v) {
  // 2^63 exactly. -2^63 itself would fit, but it is INT64_MIN, the invalid count anyway.
  constexpr double kLimit = 9223372036854775808.0;
  if (!(v > -kLimit && v < kLimit)) return kInvalidLoopCount;  // NaN too
  return int64_t(v);
}

// The count held by a one-element tensor at p (host or device memory, wherever the caller
// runs): a float count as loop_count_of_real reads it. Not checked: a negative count is
// the caller's to refuse (the CPU loop throws) or to run zero times (a kernel cannot
// throw).
TIDE_HOST_DEVICE int64_t read_loop_count(const void* p, DType dtype) {
  switch (dtype) {
    case DType::float32: return loop_count_of_real(*static_cast<const float*>(p));
    case DType::float64: return loop_count_of_real(*static_cast<const double*>(p));
    case DType::int32: return *static_cast<const int32_t*>(p);
    case DType::int64: break;
    // trace::loop refuses a 16-bit count at the call; were one to reach here, its float value.
    case DType::bfloat16: return loop_count_of_real(float(*static_cast<const bfloat16*>(p)));
    case DType::float16: return loop_count_of_real(float(*static_cast<const float16*>(p)));
  }
  return *static_cast<const int64_t*>(p);
}

// What a loop run from the host throws for a count n below zero: "loop count must be >= 0,
// got -3"; a float count is quoted as stored, in full ("got nan", "got -2.5"). `count`:
// the tensor element n was read from (host memory), or null when n is an int count.
inline std::string loop_count_error(const void* count, DType dtype, int64_t n) {
  std::ostringstream m;
  m << "loop count must be >= 0, got ";
  const bool real = count && is_floating(dtype);
  if (real) {
    const double v = dtype == DType::float64   ? *static_cast<const double*>(count)
                     : dtype == DType::float32 ? double(*static_cast<const float*>(count))
                     : dtype == DType::bfloat16
                         ? double(float(*static_cast<const bfloat16*>(count)))
                         : double(float(*static_cast<const float16*>(count)));
    m << std::setprecision(std::numeric_limits<double>::max_digits10) << v;
  } else {
    m << n;
  }
  if (real && n == kInvalidLoopCount)
    m << " (a float count must be a finite number between -2^63 and 2^63)";
  return m.str();
}

// A loop's count: the element at `tensor` when there is one, else `fixed`.
TIDE_HOST_DEVICE int64_t loop_count(const void* tensor, DType dtype, int64_t fixed) {
  return tensor ? read_loop_count(tensor, dtype) : fixed;
}

// A loop unrolled `unroll` times (unroll >= 1) runs its body graph of `unroll` iterations
// while at least that many are `left`; then, when unroll > 1, the remainder of `count`
// iterations one per launch of a second WHILE node (core/cuda/device_api.h LoopConditions).
TIDE_HOST_DEVICE bool loop_unrolled_body_runs(int64_t left, int64_t unroll) {
  return left >= unroll;
}
TIDE_HOST_DEVICE bool loop_remainder_runs(int64_t count, int64_t unroll) {
  return count > 0 && count % unroll != 0;
}

}  // namespace tide
