// Small blocks carved out of larger segments, for a BlockSource whose allocations are
// expensive: a GPU's cudaMalloc (microseconds, and it synchronizes the device's memory
// map) or cudaHostAlloc. Without it every tiny tensor a running-ahead frontend creates is
// one cudaMalloc: on an H100 (2026-11-26), `tide bench-async --device cuda` queued 10 000
// `y = x + 1` at 5.06 us each (S3's t1: every op needs a fresh block), where
// BM_CudaEnqueueTinyAdd, whose cache stays warm, took 0.47 us. With segments, an H200 took
// 380-463 ns against 4.87-5.04 us with TIDE_CUDA_SEGMENTS=0 (alternated runs, 2026-11-26,
// bench/RESULTS.md). PyTorch's caching allocator does the same (2 MB segments for blocks up
// to 1 MB).
//   - Requests up to kSmallMax bytes are bumped out of the current kSegment-byte segment,
//     each at a kAlign-aligned offset; larger ones go to the inner source as they are.
//   - A segment goes back to the inner source when its last block is released. Blocks
//     are released when the allocator gives its cache back (empty_cache, out of memory),
//     so a segment with one live block stays whole (the usual price of segments).
//   - When a segment cannot be had (a nearly full device), the small block is taken from
//     the inner source on its own, so what fitted before still fits.
// The allocator's stats count its blocks, not the segments' unused tails.
// Thread-safe (the allocator calls it under its lock; the mutex is for any other caller).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/allocator.h"

namespace tide {

class SegmentSource final : public BlockSource {
 public:
  static constexpr size_t kSegment = size_t(2) << 20;
  static constexpr size_t kSmallMax = size_t(512) << 10;
  static constexpr size_t kAlign = 256;

  explicit SegmentSource(std::unique_ptr<BlockSource> inner);
  ~SegmentSource() override;  // returns the segments still held
  SegmentSource(const SegmentSource&) = delete;
  SegmentSource& operator=(const SegmentSource&) = delete;

  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;
  std::string describe() override { return inner_->describe(); }
  size_t capacity() override { return inner_->capacity(); }

  // Segments held from the inner source now (for tests and diagnostics).
  size_t segments() const;

 private:
  struct Segment {
    size_t used = 0;  // bytes bumped out of it
    size_t live = 0;  // its blocks not yet released
  };
  std::unique_ptr<BlockSource> inner_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Segment> segments_;  // by base address
  uintptr_t current_ = 0;                  // where small blocks come from (0: none yet)
};

}  // namespace tide
