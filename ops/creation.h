// Creation ops: constant fills, ranges, random tensors, host data, copies. All queued
// (the fill runs on the backend) except from_data, which copies the host data at the call
// so the caller may reuse its buffer at once. None waits. Each takes the device to create
// on (default: the CPU); "[op] has no CUDA kernel" / "[alloc] ..." when it cannot.
#pragma once

#include <cstdint>
#include <vector>

#include "core/engine/engine.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tide {

// Throw "[op]" for negative extents (through Shape) and non-floating random dtypes. full
// into an integer dtype truncates a fractional value toward zero and throws "[full]" for a
// value the dtype cannot hold (NaN, infinities, out of its range).
Tensor zeros(const Shape& shape, DType dtype = DType::float32, Device device = Device::cpu(),
             Site site = Site::current());
Tensor ones(const Shape& shape, DType dtype = DType::float32, Device device = Device::cpu(),
            Site site = Site::current());
Tensor full(const Shape& shape, double value, DType dtype = DType::float32,
            Device device = Device::cpu(), Site site = Site::current());
// [start, start+step, ...) below end; empty when end is not reached (a negative count).
// Throws "[arange]" for a zero or non-finite argument, a count past 2^60 elements
// (arange(0, 1e300, 1e-300)), and, for an integer dtype, values it cannot hold (fractional
// values truncate toward zero).
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::float32,
              Device device = Device::cpu(), Site site = Site::current());
inline Tensor arange(int64_t n, DType dtype = DType::int64, Device device = Device::cpu(),
                     Site site = Site::current()) {
  return arange(0.0, double(n), 1.0, dtype, device, site);
}
// Standard normal / uniform [0, 1) from Philox; counters reserved from `gen` at the call.
// The same seed gives the same numbers on every device.
Tensor randn(const Shape& shape, DType dtype = DType::float32, Generator& gen = default_generator(),
             Device device = Device::cpu(), Site site = Site::current());
Tensor rand(const Shape& shape, DType dtype = DType::float32, Generator& gen = default_generator(),
            Device device = Device::cpu(), Site site = Site::current());
// Copies `values` (converted to dtype as cast converts) into a new tensor at the call (on
// a GPU: into pinned staging at the call, then a queued copy). Throws "[from_data]" when
// values.size() != shape.numel().
Tensor from_data(const std::vector<double>& values, const Shape& shape,
                 DType dtype = DType::float32, Device device = Device::cpu(),
                 Site site = Site::current());
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu(),
                   Site site = Site::current());
// A new tensor with a's values (queued copy). Differentiable.
Tensor clone(const Tensor& a, Site site = Site::current());
// a converted to dtype (queued). Differentiable between floating types. Float to integer
// truncates toward zero and saturates where C++ leaves it undefined: NaN -> 0, values
// beyond the range (infinities included) -> the dtype's max or min, on every device
// (cast(nan) is 0, cast(1e30) to int32 is 2147483647). Between integer dtypes it wraps
// (two's complement, as NumPy); to a float it rounds to nearest.
Tensor cast(const Tensor& a, DType dtype, Site site = Site::current());

}  // namespace tide
