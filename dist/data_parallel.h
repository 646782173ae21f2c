// DataParallel: data-parallel training over a ProcessGroup, after PyTorch's
// DistributedDataParallel: gradients averaged in buckets queued on the communication stream,
// overlapping the rest of backward. Design: docs/data-parallel.md.
// Not done here: parameters that get a gradient on some ranks only (see reduce_gradients).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/engine/engine.h"
#include "core/options.h"
#include "core/tensor.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace tide::dist {

struct DataParallelOptions {
  // Cap of the first bucket (PyTorch: 1 MiB): small, so its all-reduce starts early. The
  // bucket closes with the gradient that reaches the cap (it may hold more than the cap).
  TIDE_ARG(size_t, first_bucket_bytes) = size_t(1) << 20;
  // Cap of every later bucket (PyTorch: 25 MiB), with the same rule.
  TIDE_ARG(size_t, bucket_bytes) = size_t(25) << 20;
  // Broadcast the parameters (and buffers) from rank 0 at construction, so every rank
  // starts equal.
  TIDE_ARG(bool, broadcast_parameters) = true;
  // Broadcast the module's buffers from rank 0 in every reduce_gradients() (PyTorch's
  // broadcast_buffers, on by default there too). Off: each rank keeps the running
  // estimates of its own shard of the data.
  TIDE_ARG(bool, broadcast_buffers) = true;
  // Overlap (the default): each bucket's all-reduce starts once its own gradients are
  // final, while backward still computes the others. Off: no bucket starts before every
  // gradient is final (one wait on the communication stream for all of backward), the
  // baseline that shows what overlapping saves. Results are the same either way.
  TIDE_ARG(bool, overlap) = true;
};

// One bucket: parameters of one dtype, in reverse parameter order, whose gradients
// reduce_gradients() lays end to end in a flat buffer of `numel` elements, taken fresh each
// step from the caching allocator (a bucket of one parameter needs none: its gradient is
// reduced in place).
struct GradBucket {
  DType dtype = DType::float32;
  std::vector<size_t> params;    // indices into DataParallel::parameters()
  std::vector<int64_t> offsets;  // element offset of each in the flat buffer
  int64_t numel = 0;
};

class DataParallel {
 public:
  // Takes module's parameters (named_parameters() order; the module must outlive this) and
  // buffers, and lays out the buckets. With broadcast_parameters, queues a broadcast of
  // each parameter and buffer from rank 0. Does not wait. Throws "[data_parallel]" for a
  // module without parameters, a parameter or buffer not on the group's device, or a zero
  // bucket cap.
  DataParallel(nn::Module& module, ProcessGroup& group,
               const DataParallelOptions& options = DataParallelOptions());

  // Queues the average over the group of every parameter's gradient, bucket by bucket (see
  // the top of this file). Call after backward() and before the optimizer step, on every
  // rank; the step waits for the averaged gradients by hazard tracking. Does not wait.
  // A parameter without a gradient on this rank contributes zeros and gets none (every
  // rank must still call this, or the others wait for it). Failures (a rank whose gradient
  // failed, a backend error) are stored in the gradients and surface at the next sync.
  // With broadcast_buffers (the default), then queues a broadcast of each buffer from rank
  // 0 (one small collective per buffer).
  void reduce_gradients(Site site = Site::current());

  const std::vector<Tensor>& parameters() const { return params_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Bytes each reduce_gradients() all-reduces on this rank (every parameter's gradient).
  size_t bytes_per_step() const { return bytes_per_step_; }
  ProcessGroup& group() const { return group_; }

 private:
  ProcessGroup& group_;
  bool overlap_ = true;
  bool broadcast_buffers_ = true;
  std::vector<Tensor> params_;
  std::vector<Tensor> buffers_;
  std::vector<GradBucket> buckets_;
  size_t bytes_per_step_ = 0;
};

}  // namespace tide::dist
