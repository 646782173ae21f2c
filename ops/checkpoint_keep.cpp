#include "ops/checkpoint_keep.h"

#include <string>

#include "core/error.h"
#include "ops/op_util.h"

namespace tide::detail {

namespace {
constexpr const char* kOp = "checkpoint";
constexpr const char* kRule =
    "; a recomputed function must run the same ops on the same shapes as its first run";

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& sh : shapes) s += (s.empty() ? "" : ", ") + sh.str();
  return s;
}
}  // namespace

KeepTape::KeepTape(std::vector<KeptOutputs>& kept, const CheckpointOptions& options, Mode mode)
    : kept_(kept), options_(options), mode_(mode), parent_(tl_keep_tape) {
  tl_keep_tape = this;
}

KeepTape::~KeepTape() { tl_keep_tape = parent_; }

bool KeepTape::wants(OpId op, int64_t k) const {
  if (op == OpId::matmul || op == OpId::linear)
    return options_.keep_gemms_min_k > 0 && k >= options_.keep_gemms_min_k;
  return op == OpId::scaled_dot_product_attention && options_.keep_attention;
}

std::vector<Tensor> KeepTape::take(OpId op, int64_t k, const std::vector<Shape>& shapes,
                                   const std::vector<DType>& dtypes) {
  if (mode_ == Mode::record)
    return parent_ ? parent_->take(op, k, shapes, dtypes) : std::vector<Tensor>{};
  if (!wants(op, k)) return {};
  TIDE_CHECK(cursor_ < kept_.size(), kOp, "the recompute ran a kept '", op_name(op), "' (",
             shapes_text(shapes), ") past the ", kept_.size(), " the first run kept", kRule);
  const KeptOutputs& e = kept_[cursor_++];
  TIDE_CHECK(e.op == op, kOp, "kept op #", cursor_, " of the recompute is '", op_name(op),
             "' but the first run's was '", op_name(e.op), "'", kRule);
  if (e.outs.empty()) return {};  // written in place during the first run: compute it
  std::vector<Tensor> outs;
  bool same = e.outs.size() == shapes.size() && dtypes.size() == shapes.size();
  for (size_t i = 0; same && i < shapes.size(); ++i)
    same = e.outs[i].shape() == shapes[i] && e.outs[i].dtype() == dtypes[i];
  TIDE_CHECK(same, kOp, "kept '", op_name(op), "' #", cursor_, " of the recompute makes ",
             shapes_text(shapes), " ", dtypes[0], " but the first run's made ", e.outs[0].shape(),
             " ", e.outs[0].dtype(), kRule);
  for (const Tensor& t : e.outs) outs.push_back(t.detach());
  return outs;
}

std::vector<Tensor> KeepTape::reuse(OpId op, int64_t k, const std::vector<Shape>& shapes,
                                    const std::vector<DType>& dtypes) {
  return tl_keep_tape ? tl_keep_tape->take(op, k, shapes, dtypes) : std::vector<Tensor>{};
}

void KeepTape::produced(OpId op, int64_t k, const std::vector<Tensor>& outs) {
  KeepTape* t = tl_keep_tape;
  if (!t || t->mode_ != Mode::record || !t->wants(op, k)) return;
  KeptOutputs e{op, {}};
  for (const Tensor& o : outs) e.outs.push_back(o.detach());
  t->kept_.push_back(std::move(e));
}

void KeepTape::written(const Storage* s) {
  for (KeepTape* t = tl_keep_tape; t && t->mode_ == Mode::record; t = t->parent_)
    for (KeptOutputs& e : t->kept_)
      for (const Tensor& o : e.outs)
        if (o.storage() == s) {
          e.outs.clear();
          break;
        }
}

void KeepTape::check_spent() const {
  if (mode_ != Mode::replay) return;
  TIDE_CHECK(cursor_ == kept_.size(), kOp, "the recompute ran ", cursor_,
             " of the ops the first run kept, but the first run kept ", kept_.size(), kRule);
}

}  // namespace tide::detail
