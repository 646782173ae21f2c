// Reductions over all elements or one axis (negative axes count from the end). keepdim
// keeps the reduced axis with extent 1. Floating dtypes accumulate in double; results do
// not depend on the thread count. All queued; none waits.
#pragma once

#include <vector>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

// Sum of all elements: a 0-d tensor.
Tensor sum(const Tensor& a, Site site = Site::current());
Tensor sum(const Tensor& a, int axis, bool keepdim = false, Site site = Site::current());
// The sum of the squares of all elements, as a 0-d tensor: sum(a * a) in one pass with no
// (a * a) tensor, each square taken in double. Floating dtypes only (throws "[sum_squares]").
// Differentiable (2 a g).
Tensor sum_squares(const Tensor& a, Site site = Site::current());
// Mean; needs a floating dtype. Mean of an empty tensor is NaN, as in NumPy.
Tensor mean(const Tensor& a, Site site = Site::current());
Tensor mean(const Tensor& a, int axis, bool keepdim = false, Site site = Site::current());
// Max; throws "[max]" on an empty reduction. NaN propagates. The gradient is shared
// equally among tied maxima.
Tensor max(const Tensor& a, Site site = Site::current());
Tensor max(const Tensor& a, int axis, bool keepdim = false, Site site = Site::current());
// Index of the max (first on ties) as int64; throws "[argmax]" on an empty reduction.
Tensor argmax(const Tensor& a, Site site = Site::current());
Tensor argmax(const Tensor& a, int axis, bool keepdim = false, Site site = Site::current());

// Sums a broadcast gradient back to `shape` (the reverse of broadcasting). Differentiable.
// 16-bit g: one 16-bit sum where one suffices, else the float32 path between casts.
Tensor sum_to(const Tensor& g, const Shape& shape, Site site = Site::current());

}  // namespace tide
