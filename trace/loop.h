// trace::loop: a loop the trace records once, as one node that runs its body n times —
// the counterpart of tf.range inside tf.function (and, on CUDA, a conditional WHILE node).
//
//   Tensor y = trace::loop(n, [](const Tensor& x) { return x + 1.0; }, x0);
//
// `state` tensors are carried: iteration i + 1 receives what iteration i returned (same
// count, shapes and dtypes, checked). The body gets the state by value: writing a state
// tensor in place never writes the caller's tensors (traced, the state lives in the
// loop's own buffers; eagerly, the loop starts from copies, one per state and call, through
// which gradients reach the caller's tensors). A body that returns a tensor it did not
// make (a captured one) as the next state and writes it in place on the next iteration
// writes that tensor eagerly but a copy traced: return a clone() instead.
//
// n is an int, or a one-element tensor read when the loop runs (so a replay can run a
// different count without tracing again). n = 0 returns copies of the initial state. A
// plain C++ for loop inside a traced function is unrolled instead.
//
// Outside a trace the loop runs eagerly (a tensor n is read with item(), which waits).
// Inside a trace, the body is recorded once into a graph of its own (fused and planned
// like the enclosing one).
//
// Gradients: the body may train (zero_grad, backward, an optimizer step in each
// iteration), traced or not. Eagerly the loop's results also carry the gradient of every
// iteration; traced they carry none, and a backward() that reaches a result the eager loop
// would have returned requiring grad (computed from a captured tensor or a state that
// requires grad; with a tensor count, which may be 0, an initial state that does) throws
// "[backward] no gradient flows through the trace::loop at <file:line> ..." before it
// queues anything (unroll the loop with a C++ for loop in the traced function instead).
//
// Random ops in the body draw, traced, the eager run's numbers bit for bit (same seed, same
// calls), and every call draws new ones. With an int count iteration i draws what eager's
// iteration i draws; with a tensor count the body draws from a sub-stream of its generator,
// which advances by one Philox block whatever n is (0 included). The body's random ops must
// share one generator ("[loop]" otherwise). The exact rule: trace/loop.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/source_location.h"
#include "core/tensor.h"

namespace tide::trace {

using LoopBody = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Throws "[loop]" for n < 0, an n tensor with more than one element or a non-numeric
// dtype, a body that returns a different number of tensors or other shapes/dtypes than
// the state, or an empty state. A tensor n read when a traced loop runs (a float n is
// truncated) fails that replay when negative, at the sync that reads its results; inside
// a CUDA graph, which reads n on the device and cannot fail, the loop runs zero times.
std::vector<Tensor> loop(int64_t n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site = tide::SourceLocation::current());
std::vector<Tensor> loop(const Tensor& n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site = tide::SourceLocation::current());

// One state tensor.
Tensor loop(int64_t n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site = tide::SourceLocation::current());
Tensor loop(const Tensor& n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site = tide::SourceLocation::current());

}  // namespace tide::trace
