// Helpers shared by the trace tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "ops/ops.h"
#include "trace/loop.h"

namespace tide::testing {

// Waits for both, then compares shape, dtype and every byte.
inline ::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure()
           << "shapes/dtypes differ: " << a.shape().str() << " vs " << b.shape().str();
  a.wait_to_read();
  b.wait_to_read();
  const auto* pa = static_cast<const unsigned char*>(a.storage()->data()) +
                   a.offset() * int64_t(size_of(a.dtype()));
  const auto* pb = static_cast<const unsigned char*>(b.storage()->data()) +
                   b.offset() * int64_t(size_of(b.dtype()));
  for (size_t i = 0; i < a.nbytes(); ++i)
    if (pa[i] != pb[i])
      return ::testing::AssertionFailure()
             << "first difference at byte " << i << " of " << a.nbytes();
  return ::testing::AssertionSuccess();
}

// Training steps inside a loop body: x -> three SGD steps on w (zero_grad, backward, an
// update) run by trace::loop, returning the summed losses (which require grad, and which
// nothing back-propagates through). For the tests of loops that train, on every device.
inline std::function<Tensor(const Tensor&)> sgd_steps_in_a_loop(Tensor& w) {
  return [&w](const Tensor& x) {
    return trace::loop(
        3,
        [&](const Tensor& acc) {
          w.zero_grad();
          Tensor d = w * x - 1.0;
          Tensor loss = sum(d * d);
          loss.backward();
          {
            NoGrad no_grad;
            w.sub_(w.grad() * 0.1);
          }
          return acc + loss;
        },
        zeros({}, w.dtype(), w.device()));
  };
}

}  // namespace tide::testing
