// The CPU's trace::loop node: one node of the enclosing program whose kernel runs the
// body's planned program n times, ping-ponging the state between the node's output
// buffers and buffers of its own, the body's random counters advanced per iteration
// (trace/loop.h's rule); a one-state body that is one fused chain runs all iterations per
// element in registers, in place.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "trace/loop_node.h"

namespace tide::trace {

class Recorder;

// Records n's loop node into `outer` and returns the loop's results (fresh values of the
// enclosing graph). Reserves the body's random counters in `outer`.
std::vector<Tensor> add_program_loop(Recorder& outer, LoopNode n);

}  // namespace tide::trace
