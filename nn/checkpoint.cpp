#include "nn/checkpoint.h"

#include "core/error.h"
#include "ops/checkpoint.h"

namespace tide::nn {

Tensor checkpoint(const std::shared_ptr<Module>& m, const Tensor& x,
                  const CheckpointOptions& options) {
  TIDE_CHECK(m != nullptr, "checkpoint", "needs a module, got a null pointer");
  return tide::checkpoint([m](const Tensor& in) { return m->forward(in); }, x, m->parameters(),
                          options);
}

}  // namespace tide::nn
