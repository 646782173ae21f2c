// How a reduction over groups of m elements is split for a GPU (batch norm's per-channel
// sums, sums and max/argmax down long strided columns or along a few long rows): each group's
// elements in `parts` consecutive chunks of `chunk`, each chunk added by one block (or thread) into
// a partial sum, then the partials added per group in chunk order. The split depends only on the
// shape, so the sums take the same tree, and give the same bits, on every run and every GPU. Shared
// with the CPU tests, which check it covers each element once.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tide::kernels {

struct ChannelParts {
  int64_t parts = 1;  // chunks per channel (>= 1)
  int64_t chunk = 0;  // elements per chunk; the last one may hold fewer
};

// The split of m elements per group over `groups` groups: about `target` (group, chunk)
// pairs in all, chunks of at least min_chunk elements (unless there is one), at most
// max_parts per group, and no empty chunk.
TIDE_HOST_DEVICE constexpr ChannelParts split_parts(int64_t m, int64_t groups, int64_t target,
                                                    int64_t min_chunk, int64_t max_parts) {
  if (m <= 0 || groups <= 0) return {1, m > 0 ? m : 0};
  int64_t parts = (target + groups - 1) / groups;
  const int64_t by_size = (m + min_chunk - 1) / min_chunk;
  if (parts > by_size) parts = by_size;
  if (parts > max_parts) parts = max_parts;
  if (parts < 1) parts = 1;
  const int64_t chunk = (m + parts - 1) / parts;
  return {(m + chunk - 1) / chunk, chunk};
}

// Batch norm: enough blocks to fill a large GPU (kTargetBlocks over all channels) without
// chunks under kMinChunk elements, at most kMaxParts chunks per channel (the finishing
// block's loop).
inline constexpr int64_t kTargetBlocks = 1024, kMinChunk = 2048, kMaxParts = 256;
TIDE_HOST_DEVICE constexpr ChannelParts channel_parts(int64_t m, int64_t channels) {
  return split_parts(m, channels, kTargetBlocks, kMinChunk, kMaxParts);
}

// A reduction over long strided columns (few outputs, each over n elements inner apart):
// about kColumnThreads threads, each adding one chunk of one column in order.
inline constexpr int64_t kColumnThreads = 65536, kMinColumnChunk = 256, kMaxColumnParts = 1024;
TIDE_HOST_DEVICE constexpr ChannelParts column_parts(int64_t n, int64_t outputs) {
  return split_parts(n, outputs, kColumnThreads, kMinColumnChunk, kMaxColumnParts);
}

// A reduction over a few long contiguous rows (inner == 1, each output over n consecutive
// elements): each row cut into chunks, one CUB segment each, about kRowSegments segments
// in all, then each row's partial results combined in chunk order. Without the cut CUB's
// segmented reduction gives each row one block, a few blocks on a GPU of a hundred SMs.
inline constexpr int64_t kRowSegments = 1024, kMinRowChunk = 16384, kMaxRowParts = 1024;
TIDE_HOST_DEVICE constexpr ChannelParts row_parts(int64_t n, int64_t rows) {
  return split_parts(n, rows, kRowSegments, kMinRowChunk, kMaxRowParts);
}

// Segment s of rows of n elements cut by `split` (row s / parts, chunk s % parts): its first
// element and one past its last, flat in the input. For CUB's offset iterators.
struct ChunkBegin {
  int64_t n;
  ChannelParts split;
  TIDE_HOST_DEVICE int64_t operator()(int64_t s) const {
    return (s / split.parts) * n + (s % split.parts) * split.chunk;
  }
};
struct ChunkEnd {
  int64_t n;
  ChannelParts split;
  TIDE_HOST_DEVICE int64_t operator()(int64_t s) const {
    const int64_t row_end = (s / split.parts + 1) * n;
    const int64_t end = ChunkBegin{n, split}(s) + split.chunk;
    return end < row_end ? end : row_end;
  }
};

}  // namespace tide::kernels
