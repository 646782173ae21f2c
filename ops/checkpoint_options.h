// What a checkpoint keeps instead of recomputing (ops/checkpoint.h): by default nothing,
// so backward runs the whole function again; a transformer block recomputes much faster
// when it keeps the few outputs that cost the most time per byte.
#pragma once

#include <cstdint>

namespace tide {

struct CheckpointOptions {
  // Keep the output of every matmul or linear inside the function whose inner dimension K
  // is at least this (0: none). Such an output took 2K FLOPs per element, so the GEMMs of
  // largest K are the costliest to recompute for the memory they hold (in a GPT block: the
  // MLP's down-projection, K = 4 * n_embd).
  int64_t keep_gemms_min_k = 0;
  // Keep each scaled_dot_product_attention's output and log-sum-exp (one row per query):
  // its forward is then not run again; its backward still recomputes the scores.
  bool keep_attention = false;

  CheckpointOptions& gemms_min_k(int64_t k) {
    keep_gemms_min_k = k;
    return *this;
  }
  CheckpointOptions& attention(bool keep = true) {
    keep_attention = keep;
    return *this;
  }
  bool keeps_anything() const { return keep_gemms_min_k > 0 || keep_attention; }
};

}  // namespace tide
