// Helpers shared by the trace tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/tensor.h"

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

}  // namespace tide::testing
