// Embedding: a lookup table of `num` rows of width `dim`, indexed by integer ids. Its
// gradient is a deterministic scatter-add (ops/gather.h), so traced and eager training stay
// bitwise equal on every device. Not here: padding_idx, max_norm, sparse gradients.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "nn/module.h"

namespace tide::nn {

// Checks a token-id argument: throws "[op] <expected>, got (2, 4) float32" (or "... got an
// undefined tensor") unless ids are defined int32 or int64 and shape_ok(ids) holds.
template <class ShapeOk>
void check_token_ids(const Tensor& ids, ShapeOk&& shape_ok, const char* op, const char* expected) {
  const bool ok = ids.defined() && (ids.dtype() == DType::int64 || ids.dtype() == DType::int32) &&
                  shape_ok(ids);
  TIDE_CHECK(ok, op, expected, ", got ",
             ids.defined() ? ids.shape().str() + " " + std::string(tide::name(ids.dtype()))
                           : std::string("an undefined tensor"));
}

// EmbeddingOptions(num, dim) with chainable setters: .init_std(0.02).dtype(DType::float64).
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {}
  int64_t num_embeddings;
  int64_t embedding_dim;
  TIDE_ARG(double, init_std) = 1.0;  // weight ~ N(0, init_std^2), PyTorch's default N(0, 1)
  TIDE_ARG_AS(DType, dtype, param_dtype) = DType::float32;
};

// weight (num, dim); forward(ids) gathers rows: ids of any shape S (int32 or int64, on the
// weight's device) give (S..., dim). An id outside [0, num) fails when the kernel runs, as
// take_rows does (on the CPU the first sync throws "[take_rows] index ... outside the ...
// rows").
class Embedding : public Module {
 public:
  // Throws "[Embedding]" for num or dim < 1, a negative init_std or a non-floating dtype.
  explicit Embedding(const EmbeddingOptions& opt, Generator& gen = default_generator());
  Embedding(int64_t num, int64_t dim) : Embedding(EmbeddingOptions(num, dim)) {}
  // Throws "[Embedding]" naming the shape and dtype unless ids are int32/int64 with at least
  // one dimension. Queued; does not wait.
  Tensor forward(const Tensor& ids) override;
  std::string name() const override { return "Embedding"; }
  const Tensor& weight() const { return weight_; }
  const EmbeddingOptions& options() const { return opt_; }

 private:
  EmbeddingOptions opt_;
  Tensor weight_;
};

}  // namespace tide::nn
