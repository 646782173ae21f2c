#include "nn/loss.h"

#include "core/error.h"
#include "ops/ops.h"

namespace tide::nn {

namespace {

// target reshaped to pred's shape (Gluon's reshape_like), after the checks.
Tensor diff(const Tensor& pred_in, const Tensor& target_in, const char* op) {
  // Under autocast a loss runs in float32 (ops/autocast.h).
  Tensor pred = pred_in, target = target_in;
  autocast::raise({&pred, &target});
  TIDE_CHECK(pred.numel() == target.numel(), op, "pred ", pred.shape(), " and target ",
             target.shape(), " have different numbers of elements");
  TIDE_CHECK(pred.dtype() == target.dtype(), op, "pred dtype ", pred.dtype(),
             " differs from target dtype ", target.dtype());
  TIDE_CHECK(is_floating(pred.dtype()), op, "needs a floating dtype, got ", pred.dtype());
  TIDE_CHECK(pred.numel() > 0, op, "empty input ", pred.shape());
  Tensor t = target.shape() == pred.shape() ? target : target.reshape(pred.shape().vec());
  return sub(pred, t);
}

}  // namespace

Tensor l2_loss(const Tensor& pred, const Tensor& target) {
  Tensor d = diff(pred, target, "l2_loss");
  return mean(mul(mul(d, d), 0.5));
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  Tensor d = diff(pred, target, "mse_loss");
  return mean(mul(d, d));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  TIDE_CHECK(logits.ndim() == 2, "cross_entropy", "logits must be (N, C), got ", logits.shape());
  TIDE_CHECK(is_floating(logits.dtype()), "cross_entropy", "logits need a floating dtype, got ",
             logits.dtype());
  TIDE_CHECK(labels.ndim() == 1, "cross_entropy", "labels must be (N), got ", labels.shape());
  TIDE_CHECK(labels.dtype() == DType::int64 || labels.dtype() == DType::int32, "cross_entropy",
             "labels need dtype int64, got ", labels.dtype());
  const int64_t n = logits.size(0), c = logits.size(1);
  TIDE_CHECK(labels.size(0) == n, "cross_entropy", "logits ", logits.shape(), " and labels ",
             labels.shape(), " disagree on N");
  TIDE_CHECK(n > 0 && c > 0, "cross_entropy", "empty logits ", logits.shape());
  TIDE_CHECK(labels.device() == logits.device(), "cross_entropy", "logits on ",
             logits.device().str(), " and labels on ", labels.device().str());
  // One kernel per row, which checks each label against C when it runs (no wait here): a
  // label outside [0, C) fails the loss on the CPU and makes it NaN on a GPU (ops/linalg.h).
  // No (N, C) one-hot or log-softmax is made (GPT-2's would be 1.6 GB each at batch 8).
  return div(sum(cross_entropy_rows(logits, labels, "cross_entropy")), double(n));
}

}  // namespace tide::nn
