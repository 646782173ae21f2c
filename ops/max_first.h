// max / argmax's rule, "the first NaN, else the first maximum", as one binary operation on
// (value, index) pairs that any reduction tree may apply: CUB's reductions, and the split
// reductions of a GPU (a column or a row cut into chunks whose partial results are then
// combined, ops/channel_parts.h). Shared with the CPU tests, which check that combining
// chunk results gives the sequential loop's answer.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/host_device.h"

namespace tide::kernels {

template <class T>
TIDE_HOST_DEVICE bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// An element and its index (flat in the input, or within its row or column).
template <class T>
struct ValIdx {
  T v;
  int64_t i;
};

// The greater of two (value, index) pairs in the order "NaN above every number, larger
// value above smaller, then lower index above higher". A total order, so the operation is
// associative and commutative: any tree gives the CPU's "first NaN, else first maximum".
struct MaxFirst {
  template <class T>
  TIDE_HOST_DEVICE ValIdx<T> operator()(const ValIdx<T>& a, const ValIdx<T>& b) const {
    const bool an = is_nan_value(a.v), bn = is_nan_value(b.v);
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    if (a.v > b.v) return a;
    if (b.v > a.v) return b;
    return a.i < b.i ? a : b;
  }
};

// The identity of MaxFirst: below every element (the lowest value ties, then loses on the
// index).
template <class T>
TIDE_HOST_DEVICE ValIdx<T> max_identity() {
  if constexpr (std::is_floating_point_v<T>)
    return {-std::numeric_limits<T>::infinity(), std::numeric_limits<int64_t>::max()};
  else return {std::numeric_limits<T>::lowest(), std::numeric_limits<int64_t>::max()};
}

}  // namespace tide::kernels
