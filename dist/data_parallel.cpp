// DataParallel: the bucket layout, the broadcast at construction and the bucketed
// gradient average.
#include "dist/data_parallel.h"

#include <algorithm>
#include <span>
#include <utility>

#include "core/error.h"
#include "ops/autograd.h"
#include "ops/creation.h"

namespace tide::dist {
namespace {

constexpr const char* kOp = "data_parallel";

// Reverse parameter order. A bucket closes once it holds at least its cap, or before a
// gradient of another dtype (PyTorch's rule): so the first bucket, whose cap is small, still
// takes the last layers' gradients up to a large weight, and its all-reduce can run while
// backward computes the layers before. The first cap is first_bucket_bytes, every later
// one bucket_bytes.
std::vector<GradBucket> lay_out(const std::vector<Tensor>& params, const DataParallelOptions& o) {
  std::vector<GradBucket> out;
  GradBucket cur;
  size_t cur_bytes = 0, cap = o.first_bucket_bytes_;
  auto close = [&] {
    out.push_back(std::move(cur));
    cur = GradBucket();
    cur_bytes = 0;
    cap = o.bucket_bytes_;
  };
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    if (!cur.params.empty() && p.dtype() != cur.dtype) close();
    cur.dtype = p.dtype();
    cur.params.push_back(k);
    cur.offsets.push_back(cur.numel);
    cur.numel += p.numel();
    cur_bytes += p.nbytes();
    if (cur_bytes >= cap) close();
  }
  if (!cur.params.empty()) close();
  return out;
}

}  // namespace

DataParallel::DataParallel(nn::Module& module, ProcessGroup& group,
                           const DataParallelOptions& options)
    : group_(group),
      overlap_(options.overlap_),
      broadcast_buffers_(options.broadcast_buffers_),
      params_(module.parameters()) {
  TIDE_CHECK(!params_.empty(), kOp, "the module has no parameters");
  TIDE_CHECK(options.first_bucket_bytes_ > 0 && options.bucket_bytes_ > 0, kOp,
             "bucket caps must be positive, got first_bucket_bytes ", options.first_bucket_bytes_,
             " and bucket_bytes ", options.bucket_bytes_);
  for (const auto& [name, p] : module.named_parameters())
    TIDE_CHECK(p.device() == group.device(), kOp, "parameter '", name, "' is on ", p.device().str(),
               " but the ", group.backend(), " group reduces on ", group.device().str(),
               " (move the model with to(), or use ",
               group.device().is_cpu() ? "dist::nccl_world() for GPU parameters)"
                                       : "dist::mpi_world() for CPU parameters)");
  for (const auto& [name, b] : module.named_buffers()) {
    TIDE_CHECK(b.device() == group.device(), kOp, "buffer '", name, "' is on ", b.device().str(),
               " but the ", group.backend(), " group broadcasts on ", group.device().str(),
               " (move the model with to())");
    buffers_.push_back(b);
  }
  buckets_ = lay_out(params_, options);
  for (const Tensor& p : params_) bytes_per_step_ += p.nbytes();
  if (options.broadcast_parameters_) {
    NoGrad no_grad;  // an in-place write of leaves that require grad
    for (const Tensor& p : params_) group_.broadcast(p, 0);
    for (const Tensor& b : buffers_) group_.broadcast(b, 0);
  }
}

void DataParallel::reduce_gradients(Site site) {
  NoGrad no_grad;
  // The copies run on the communication stream too: queued on the compute stream, they
  // would wait behind the whole backward there.
  StreamGuard on_comm(group_.stream());
  if (!overlap_) {
    // Tasks that only read the gradients (a task holds at most Engine::kMaxStorages): the
    // stream's later tasks wait behind them, so no bucket starts before backward wrote all.
    std::vector<Storage*> grads;
    for (const Tensor& p : params_)
      if (p.grad().defined()) grads.push_back(p.grad().storage());
    for (size_t i = 0; i < grads.size(); i += Engine::kMaxStorages) {
      const size_t n = std::min(grads.size() - i, size_t(Engine::kMaxStorages));
      Engine::get().submit(
          group_.device(), "data_parallel_fence", std::span<Storage* const>(grads.data() + i, n),
          std::span<Storage* const>(), [] {}, site);
    }
  }
  for (const GradBucket& b : buckets_) {
    if (b.params.size() == 1) {  // reduced in place, no copies
      Tensor g = params_[b.params[0]].grad();
      if (!g.defined()) g = zeros(params_[b.params[0]].shape(), b.dtype, group_.device());
      group_.all_reduce(g, ReduceOp::average, site);
      continue;
    }
    // A fresh buffer each step: a failure stored in it stays with this step only.
    Tensor flat = Tensor::empty({b.numel}, b.dtype, group_.device(), kOp);
    std::vector<std::pair<Tensor, Tensor>> views;  // (gradient, its place in flat)
    for (size_t i = 0; i < b.params.size(); ++i) {
      const Tensor& p = params_[b.params[i]];
      Tensor view = flat.slice(b.offsets[i], b.offsets[i] + p.numel()).reshape(p.shape().vec());
      Tensor g = p.grad();
      view.copy_(g.defined() ? g : zeros(p.shape(), b.dtype, group_.device()), site);
      views.emplace_back(g, view);
    }
    group_.all_reduce(flat, ReduceOp::average, site);
    for (auto& [g, view] : views)
      if (g.defined()) g.copy_(view, site);
  }
  if (broadcast_buffers_)
    for (const Tensor& b : buffers_) group_.broadcast(b, 0, site);
}

}  // namespace tide::dist
