// The gather family: rows of a tensor picked by index, and the adjoint that adds rows back
// (embedding lookups and their gradient; a data set kept on a GPU and its minibatches).
#pragma once

#include <cstdint>

#include "core/engine/engine.h"
#include "core/tensor.h"

namespace tide {

// y[i, ...] = src[rows[i], ...] for i < k: shape (k, src.shape[1:]), src's dtype and
// device. `rows` is 1-D int32 or int64 on src's device; repeats are allowed. Differentiable
// in src: the gradient adds each row of g into the row it came from (scatter_add_rows).
// The indices are on the device, so their range is checked when the kernel runs, without
// a wait: an index outside [0, n) fails the op on the CPU ("[take_rows] index 7 at
// position 2 is outside the 5 rows [0, 5)", thrown by the first sync that touches the
// result); a CUDA kernel cannot throw, so on a GPU that output row is NaN (floating) or
// the dtype's lowest value (integers). Throws "[take_rows]" at the call for a 0-d src,
// rows that are not 1-D integers, or rows on another device. 16-bit src: moved as it is
// on the CPU (its gradient's scatter-add in float32), elsewhere the float32 path between
// casts. Queued; does not wait.
Tensor take_rows(const Tensor& src, const Tensor& rows, Site site = Site::current());

// The adjoint of take_rows: y of shape (n, g.shape[1:]) starts at zero, then
// y[rows[i], ...] += g[i, ...] for i in increasing order, on every device (the CUDA kernel
// sorts the positions by row, stably, and sums each row's positions in that order, so
// results are the CPU's bits and never depend on scheduling). Differentiable in g (its
// gradient is take_rows). Index range as take_rows (on a GPU an index outside [0, n) is
// skipped). Throws "[scatter_add_rows]" at the call for a 0-d g, rows that are not 1-D
// integers of g.size(0) elements, rows on another device, or n < 0.
Tensor scatter_add_rows(const Tensor& g, const Tensor& rows, int64_t n,
                        Site site = Site::current());

}  // namespace tide
