// trace::function's verify mode on the CPU: one call runs the recorded kernels the way eager runs
// them (recording order, every value in its own buffer, nothing fused) and then the
// planned, fused program on the same inputs and random counters, and compares every value
// the program writes, node by node. Persistent values (parameters, state, arguments
// updated in place) are restored between the two runs, so the call has its effects once.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/source_location.h"
#include "core/tensor.h"
#include "trace/fusion.h"
#include "trace/graph.h"

namespace tide::trace {

// Waits for all queued work, then runs both on the calling thread. Returns the planned
// run's outputs. Throws tide::Error("[trace] verify: ...") naming the first node (op and
// where it was traced) whose result differs from eager, bit for bit. Needs g.reference.
std::vector<Tensor> verify_program(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                                   Fusion fusion, tide::SourceLocation site);

}  // namespace tide::trace
