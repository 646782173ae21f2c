// What a checkpoint keeps of its first run instead of recomputing it (ops/checkpoint.h,
// CheckpointOptions): the outputs of the GEMMs and attentions its options name. Recording,
// each such op appends its outputs to the tape; replaying (the recompute), each takes the
// next entry instead of queueing its kernel and records its gradient node over the kept
// outputs as usual, so results and gradients keep their bits. An in-place write to a kept
// output during the first run drops that entry (the recompute then computes it). Thread-
// local; a recording tape inside a replaying one takes its entries through the outer one.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/checkpoint_options.h"
#include "ops/op_traits.h"

namespace tide::detail {

// One kept op: its outputs (empty once dropped).
struct KeptOutputs {
  OpId op;
  std::vector<Tensor> outs;
};

class KeepTape;
inline thread_local KeepTape* tl_keep_tape = nullptr;

class KeepTape {
 public:
  enum class Mode { record, replay };
  // Installs the tape on this thread over `kept` (RAII).
  KeepTape(std::vector<KeptOutputs>& kept, const CheckpointOptions& options, Mode mode);
  ~KeepTape();
  KeepTape(const KeepTape&) = delete;
  KeepTape& operator=(const KeepTape&) = delete;

  // Whether a tape is installed on this thread (ops call the two below only then, so that
  // their enqueue path builds no shape list otherwise).
  static bool active() { return tl_keep_tape != nullptr; }
  // Called by op `op` (inner dimension k for a GEMM, else 0) before it computes: the outputs
  // to use instead (fresh handles), or an empty list to compute; shapes and dtypes, one
  // each per output. Throws "[checkpoint]" when a recompute's kept op has outputs of other
  // shapes or dtypes than the first run's.
  static std::vector<Tensor> reuse(OpId op, int64_t k, const std::vector<Shape>& shapes,
                                   const std::vector<DType>& dtypes);
  // Called by the op after reuse() with its outputs (computed or reused): kept when recording
  // and the options name the op.
  static void produced(OpId op, int64_t k, const std::vector<Tensor>& outs);
  // An in-place write into `s`: drops a recorded entry that holds it.
  static void written(const Storage* s);
  // Throws "[checkpoint]" in replay unless every entry was taken.
  void check_spent() const;

 private:
  bool wants(OpId op, int64_t k) const;
  std::vector<Tensor> take(OpId op, int64_t k, const std::vector<Shape>& shapes,
                           const std::vector<DType>& dtypes);

  std::vector<KeptOutputs>& kept_;
  CheckpointOptions options_;
  Mode mode_;
  size_t cursor_ = 0;
  KeepTape* parent_;
};

}  // namespace tide::detail
