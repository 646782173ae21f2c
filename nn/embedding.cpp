// Embedding (nn/embedding.h): a parameter and take_rows over the flattened ids.
#include "nn/embedding.h"

#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

Embedding::Embedding(const EmbeddingOptions& opt, Generator& gen) : opt_(opt) {
  TIDE_CHECK(opt.num_embeddings > 0 && opt.embedding_dim > 0, "Embedding",
             "needs num_embeddings and embedding_dim >= 1, got ", opt.num_embeddings, " and ",
             opt.embedding_dim);
  TIDE_CHECK(opt.init_std_ >= 0, "Embedding", "init_std must be >= 0, got ", opt.init_std_);
  TIDE_CHECK(is_floating(opt.param_dtype), "Embedding", "needs a floating dtype, got ",
             opt.param_dtype);
  weight_ = register_parameter("weight", normal_init({opt.num_embeddings, opt.embedding_dim},
                                                     opt.init_std_, opt.param_dtype, gen));
}

Tensor Embedding::forward(const Tensor& ids) {
  check_token_ids(
      ids, [](const Tensor& t) { return t.ndim() >= 1; }, "Embedding",
      "expected int32/int64 ids with at least one dimension");
  std::vector<int64_t> out(ids.shape().begin(), ids.shape().end());
  out.push_back(opt_.embedding_dim);
  return take_rows(weight_, ids.reshape({-1})).reshape(out);
}

}  // namespace tide::nn
