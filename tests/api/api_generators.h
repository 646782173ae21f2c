// The random API driver's op generators: one small function per family of public calls,
// in one weighted table. A generator draws its operands from the case's pool (or makes
// fresh ones), usually builds a valid call and sometimes a deliberately invalid one (bad
// shape, axis, dtype, device, range), computes the expected outcome with the reference
// (api_ops.h), runs the call through Case::call and pools the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/api/api_driver.h"

namespace tide::api {

// Input classes the driver left out until the defects behind them were fixed (true: fixed
// and generated again; the comments say what the defect was). Each
// left-out call is logged ("# skipped (<class>)") and counted in the summary a test prints.
// Set a flag to true to generate the class again once its fix is in; what the calls must
// then do is said per flag (where the fixed behaviour is not settled: a tide::Error or a
// result, whose values are not checked).
struct KnownDefects {
  // Float -> integer conversion of values outside the integer type (NaN and inf too):
  // add(int32 tensor, 1e30), full(shape, 1e30, int32), cast(NaN -> int32), comparisons of
  // an integer tensor with such a scalar. Undefined behaviour in the kernels.
  static constexpr bool float_to_int_out_of_range = true;  // fixed
  // Integer elementwise arithmetic, in-place updates and sums whose result leaves the
  // dtype (int32 2147483647 + 1, neg of -2^31): signed overflow, undefined behaviour in the
  // kernels (UBSan stops the process). Found by this driver.
  static constexpr bool integer_overflow = true;  // fixed
  // In-place ops on an integer tensor with a fractional scalar: x.mul_(0.5) multiplies by
  // 0 and x.add_(y, 0.5) adds 0 * y (the scalar is truncated), where mul(x, 0.5) throws
  // "[mul] scalar 0.5 is not an integer". Found by this driver (a change to
  // ops/elementwise.cpp under way refuses them). When set, such calls must throw
  // tide::Error.
  static constexpr bool int_inplace_fractional_scalar = true;  // fixed
  // Inside a trace::function body, an in-place write (add_, mul_, copy_, ...) to a tensor
  // the body made from host data (from_vector / from_data), or to a view of one: replays
  // read zeros or values left by an earlier call instead of the data. Found by this driver.
  // When set, every call of the traced function must match the body run eagerly.
  static constexpr bool traced_write_to_host_data = true;  // fixed
  // backward(grad) with the gradient on another device than the output: not checked at
  // the call, so it throws "[mul] devices differ" from inside the backward pass after
  // gradient ops were queued and a partial gradient was accumulated, or (for a leaf)
  // leaves grad() on the wrong device. Found by this driver. When set, such calls must
  // throw tide::Error before queuing anything.
  static constexpr bool backward_grad_on_other_device = true;  // fixed
  // Not generated at all, as the driver keeps tensors small: matmul dims >= 2^31, arange
  // with counts past 2^60, cross_entropy (nn is not part of tide.h), reads racing with
  // writes from other threads, static tensors destroyed at exit, copy_/fill over a tensor
  // whose producer failed.
};

struct OpGen {
  const char* name;
  int weight;      // relative frequency
  bool traceable;  // may run inside a trace::function body
  void (*run)(Case&);
  bool only_traced = false;  // only inside one, with a traced_generator (g_random_traced)
};
const std::vector<OpGen>& generators();

// Runs one generator, drawn by weight among those the case may use.
void random_step(Case& c);

// Shapes and values the generators use, exposed for the traced and autograd tests.
Shape random_shape(Case& c, int64_t max_numel = 36, int max_rank = 4);
DType random_dtype(Case& c);
DType random_floating(Case& c);
std::vector<double> random_values(Case& c, int64_t n, DType t);
// A new tensor of `values` on `device` through from_vector<T> or from_data, logged.
Val make_val(Case& c, const Shape& s, DType t, Device device, const std::vector<double>& values);
Val make_val(Case& c, const Shape& s, DType t);  // random values, the case's device

}  // namespace tide::api
