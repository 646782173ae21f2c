// trace::loop: a loop a trace records once, as one node that runs its body n times (the
// counterpart of tf.range inside tf.function; a WHILE node on CUDA). Rules: docs/traced.md.
//
//   Tensor y = trace::loop(n, [](const Tensor& x) { return x + 1.0; }, x0);
//
// The body gets the state by value; n is an int or a one-element tensor read when the loop
// runs. Outside a trace the loop runs eagerly (a tensor n is read with item(), which waits).
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
