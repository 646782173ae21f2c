#include "nn/module.h"

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/memory_record.h"
#include "ops/ops.h"

namespace tide::nn {

Tensor Module::forward(const Tensor&) { throw Error(name(), "forward is not implemented"); }

void Module::check_new_name(const std::string& n, const char* op) const {
  TIDE_CHECK(!n.empty(), op, "empty name in ", name());
  TIDE_CHECK(n.find('.') == std::string::npos, op, "name '", n, "' contains '.'");
  for (const auto& [k, v] : params_)
    TIDE_CHECK(k != n, op, "name '", n, "' is already a parameter of ", name());
  for (const auto& [k, v] : buffers_)
    TIDE_CHECK(k != n, op, "name '", n, "' is already a buffer of ", name());
  for (const auto& [k, v] : children_)
    TIDE_CHECK(k != n, op, "name '", n, "' is already a submodule of ", name());
}

Tensor Module::register_buffer(const std::string& n, const Tensor& t) {
  check_new_name(n, "register_buffer");
  TIDE_CHECK(t.defined(), "register_buffer", "buffer '", n, "' is undefined");
  Tensor b = t.detach();
  memory::tag(b, memory::Role::parameter);
  buffers_.emplace_back(n, b);
  return b;
}

Tensor Module::register_parameter(const std::string& n, const Tensor& t) {
  check_new_name(n, "register_parameter");
  TIDE_CHECK(t.defined(), "register_parameter", "parameter '", n, "' is undefined");
  TIDE_CHECK(is_floating(t.dtype()), "register_parameter", "parameter '", n,
             "' needs a floating dtype, got ", t.dtype());
  Tensor p = t.detach();
  p.requires_grad_(true);
  memory::tag(p, memory::Role::parameter);
  params_.emplace_back(n, p);
  return p;
}

void Module::add_child(const std::string& n, std::shared_ptr<Module> m) {
  TIDE_CHECK(m != nullptr, "register_module", "module '", n, "' is null");
  check_new_name(n, "register_module");
  TIDE_CHECK(m.get() != this, "register_module", "a module cannot contain itself");
  children_.emplace_back(n, std::move(m));
}

void Module::collect(const std::string& prefix, Which which,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  if (which != Which::buffers)
    for (const auto& [k, v] : params_) out.emplace_back(prefix + k, v);
  if (which != Which::parameters)
    for (const auto& [k, v] : buffers_) out.emplace_back(prefix + k, v);
  for (const auto& [k, m] : children_) m->collect(prefix + k + ".", which, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", Which::parameters, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", Which::buffers, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", Which::state, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [k, v] : named_parameters()) out.push_back(v);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [k, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& [k, v] : params_) v.zero_grad();
  for (auto& [k, m] : children_) m->zero_grad();
}

Module& Module::to(Device device) {
  std::vector<std::pair<std::string, Tensor>> params = named_state();
  // Refuse an unusable device first, before looking at (or touching) any parameter.
  bool usable = device.is_cpu() || (device.is_cuda() && cuda::available(device.index));
  TIDE_CHECK(usable && op_supported(device, OpId::copy_), "to", "cannot move ", name(), " (",
             params.size(), " parameters) to ", device.str(), ": ",
             usable ? "no kernels for it in this build" : "this process has no such device",
             "; the module is unchanged");
  for (auto& [k, p] : params) {
    if (p.device() == device) continue;
    Tensor moved = p.detach().to(device);
    TensorImpl& impl = p.impl();  // every handle to the parameter sees the move
    impl.storage = moved.impl().storage;
    impl.offset = moved.offset();
    impl.device = device;
    impl.grad.reset();
    if (memory::detail::on()) [[unlikely]]
      memory::tag(p, memory::Role::parameter);  // buffers too: state that lives all run
  }
  return *this;
}

// ---- Sequential ---------------------------------------------------------------------------

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(size()), std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const auto& c = children();
  for (size_t i = 0; i < c.size(); ++i) {
    // Linear then ReLU: one op (Linear::forward_fused).
    auto* lin = dynamic_cast<Linear*>(c[i].second.get());
    if (lin && i + 1 < c.size() && dynamic_cast<ReLU*>(c[i + 1].second.get())) {
      y = lin->forward_fused(y, true);
      ++i;
      continue;
    }
    y = c[i].second->forward(y);
  }
  return y;
}

// ---- Linear -------------------------------------------------------------------------------

Linear::Linear(const LinearOptions& opt, Generator& gen) : opt_(opt) {
  TIDE_CHECK(opt.in_features > 0 && opt.out_features > 0, "Linear",
             "sizes must be positive, got in=", opt.in_features, " out=", opt.out_features);
  weight_ = register_parameter(
      "weight",
      opt.weight_init == Init::normal
          ? normal_init({opt.in_features, opt.out_features}, opt.init_std_, opt.param_dtype, gen)
          : initialize(opt.weight_init, {opt.in_features, opt.out_features}, opt.param_dtype, gen));
  if (opt.with_bias)
    bias_ = register_parameter("bias", zeros_init({opt.out_features}, opt.param_dtype));
}

Tensor Linear::forward_fused(const Tensor& x, Activation act) {
  TIDE_CHECK(x.ndim() == 2 && x.size(1) == opt_.in_features, "Linear", "expected input (N, ",
             opt_.in_features, "), got ", x.shape());
  TIDE_CHECK(x.dtype() == opt_.param_dtype || autocast::active(), "Linear", "input dtype ",
             x.dtype(), " differs from the parameters' ", opt_.param_dtype);
  // The bias (and a following activation) ride on the GEMM: cuBLASLt's epilogues on a GPU,
  // each part of the GEMM's rows right after it on the CPU. That saves kernels and passes
  // over the output.
  if (bias_.defined()) return linear(x, weight_, bias_, act);
  Tensor y = matmul(x, weight_);
  if (act == Activation::relu) return relu(y);
  if (act == Activation::gelu_tanh) return gelu(y, GeluApprox::tanh);
  return y;
}

Tensor Linear::forward(const Tensor& x) { return forward_fused(x, false); }

// ---- activations ----------------------------------------------------------------------------

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tide::tanh(x); }

// ---- Dropout --------------------------------------------------------------------------------

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(&gen) {
  TIDE_CHECK(p >= 0.0 && p < 1.0, "Dropout", "p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), *gen_); }

}  // namespace tide::nn
