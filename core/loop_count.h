// A counted loop's count and conditions, one definition for every place that runs a loop:
// the CPU loop node (trace/loop.cpp), a fused loop's kernels (ops/fused_chain.h), the CUDA
// loop kernels (core/cuda/graph_loop.cu) and the recording fake that stands in for them
// (core/cuda/fake_graph.cpp). So the fake's tests check the rule the device runs. The
// compiled chains' CUDA source writes the same read out as text (ops/chain_source.cpp),
// checked against this one by tests/ops/test_chain_source_host.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace tide {

// The count held by a one-element tensor at p (host or device memory, wherever the caller
// runs): a float count is truncated toward zero. Not checked: a negative count is the
// caller's to refuse (the CPU loop throws) or to run zero times (a kernel cannot throw).
TIDE_HOST_DEVICE int64_t read_loop_count(const void* p, DType dtype) {
  switch (dtype) {
    case DType::float32: return int64_t(*static_cast<const float*>(p));
    case DType::float64: return int64_t(*static_cast<const double*>(p));
    case DType::int32: return *static_cast<const int32_t*>(p);
    case DType::int64: break;
  }
  return *static_cast<const int64_t*>(p);
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
