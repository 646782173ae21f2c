// Broadcast geometry shared by the CPU loops and the CUDA kernels: the output shape and
// which of its dims each operand broadcasts. Plain data, host and device.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/shape.h"

namespace tide::kernels {

// Compact (72 bytes) so a broadcasting entry's closure fits in the task record.
struct BroadcastGeometry {
  int64_t out[kMaxDims]{};
  uint8_t ndim = 0, bcast_a = 0, bcast_b = 0;  // bit i set: extent 1 or absent there

  // Element strides of an operand along each output dim (0 where it broadcasts).
  TIDE_HOST_DEVICE void strides(uint8_t bcast, int64_t* s) const {
    int64_t acc = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      bool b = (bcast >> i) & 1;
      s[i] = b ? 0 : acc;
      acc *= b ? 1 : out[i];
    }
  }
  TIDE_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= out[i];
    return n;
  }
};

inline uint8_t broadcast_mask(const Shape& in, const Shape& out) {
  uint8_t m = 0;
  int pad = out.ndim() - in.ndim();
  for (int i = 0; i < out.ndim(); ++i) {
    int j = i - pad;
    if (j < 0 || (in[j] == 1 && out[i] != 1)) m |= uint8_t(1u << i);
  }
  return m;
}

inline BroadcastGeometry make_geometry(const Shape& a, const Shape& b, const Shape& out) {
  BroadcastGeometry g;
  g.ndim = uint8_t(out.ndim());
  for (int i = 0; i < out.ndim(); ++i) g.out[i] = out[i];
  g.bcast_a = broadcast_mask(a, out);
  g.bcast_b = broadcast_mask(b, out);
  return g;
}

}  // namespace tide::kernels
