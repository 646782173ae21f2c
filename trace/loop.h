// trace::loop: a loop the trace records once, as one node that runs its body n times —
// the counterpart of tf.range inside tf.function (and, on CUDA, a conditional WHILE node).
//
//   Tensor y = trace::loop(n, [](const Tensor& x) { return x + 1.0; }, x0);
//
// `state` tensors are carried: iteration i + 1 receives what iteration i returned (same
// count, shapes and dtypes, checked). n is an int, or a one-element tensor read when the
// loop runs (so a replay can run a different count without tracing again). n = 0 returns
// copies of the initial state. A plain C++ for loop inside a traced function is unrolled
// instead.
//
// Outside a trace the loop runs eagerly (a tensor n is read with item(), which waits).
// Inside a trace, the body is recorded once into a graph of its own (fused and planned
// like the enclosing one).
//
// Random ops in the body follow one rule in eager and traced mode, so a traced run draws
// the eager run's numbers bit for bit (same seed, same calls), and every call draws new
// ones:
//   - An int count: the body draws from its generator as the plain eager loop does
//     (iteration i gets the counters eager's iteration i reserves); the traced node
//     reserves the range of all n iterations when the replay is queued.
//   - A tensor count: the body draws from a sub-stream of its generator. When the loop
//     runs (in eager order among the random ops around it), it reserves ONE Philox block
//     (counter c = gen.reserve(4), key k = gen.seed()) and keys the sub-stream with
//     substream_key(k, c) = splitmix64(splitmix64(k) ^ c) (core/rng.h); iteration i,
//     random op j of the body draws at block i * S + prefix_j under that key (S: blocks
//     the body draws per iteration, prefix_j: blocks of its random ops before j). The
//     generator advances by exactly one block whatever n is, 0 included; the numbers
//     are independent of what the same body draws under an int count. Traced, the block
//     is reserved when the replay is queued and the key derived when the node runs.
//     Eager (core/random_scope.h), the block is reserved at the body's first random op
//     of iteration 0 (nothing can draw from that generator in between, so the order is
//     the same); with n == 0 the eager loop records the body once, without running it,
//     to learn its generator and reserves the block all the same — the body's C++ side
//     effects happen once then, and a body that cannot be recorded (it reads a value on
//     the host, so it cannot be traced either) reserves nothing. Random ops of zero
//     elements draw nothing and do not count. Nested loops compose: an inner loop draws
//     its range or block from the enclosing loop's sub-stream.
//   The body's random ops must share one generator ("[loop]" otherwise, traced at record
//   time, eager at the first draw of the second generator, or at n == 0 after recording).
//   A trace::function replayed inside an eager tensor-count body draws from the
//   sub-stream too (its ops are inlined when the enclosing loop is traced).
#pragma once

#include <cstdint>
#include <functional>
#include "core/source_location.h"
#include <vector>

#include "core/tensor.h"

namespace tide::trace {

using LoopBody = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Throws "[loop]" for n < 0, an n tensor with more than one element or a non-numeric
// dtype, a body that returns a different number of tensors or other shapes/dtypes than
// the state, or an empty state.
std::vector<Tensor> loop(int64_t n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site = tide::SourceLocation::current());
std::vector<Tensor> loop(const Tensor& n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site = tide::SourceLocation::current());

// One state tensor.
Tensor loop(int64_t n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site = tide::SourceLocation::current());
Tensor loop(const Tensor& n, const std::function<Tensor(const Tensor&)>& body,
            const Tensor& state, tide::SourceLocation site = tide::SourceLocation::current());

}  // namespace tide::trace
