// nn::Module: parameters and submodules registered by name, train/eval mode, to(device),
// and the layers built on it (Sequential, Linear, ReLU, Sigmoid, Tanh, Dropout).
//
// Parameters are ordinary leaf tensors with requires_grad set. named_parameters() returns
// handles to the same impls, so an optimizer that updates them in place updates the module.
// Names are dotted paths through the submodules: a Sequential holding a Linear at index 0
// names its weight "0.weight". Order: a module's own parameters in registration order,
// then each submodule's, depth first.
//
// Buffers (BatchNorm2d's running estimates) are state that is saved and moved with the
// module but is not a parameter: no gradient, not given to optimizers. named_state() lists
// parameters and buffers in PyTorch's state_dict order (per module: its parameters, its
// buffers, then its submodules), which save/load use.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/options.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "nn/init.h"
#include "ops/linalg.h"

namespace tide::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The layer's computation. The base throws "[<name>] forward is not implemented".
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // A short type name for messages ("Linear", "Sequential", ...).
  virtual std::string name() const { return "Module"; }

  // Registers `t` (detached from any history) as a parameter and sets requires_grad.
  // Returns the registered handle. Throws "[register_parameter]" for an empty name, a name
  // containing '.', a duplicate name, an undefined tensor or a non-floating dtype.
  Tensor register_parameter(const std::string& name, const Tensor& t);
  // Registers a submodule; its parameters appear under "name.". Throws
  // "[register_module]" for a null module, an empty or dotted name, or a duplicate.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Registers `t` (detached, no grad; any dtype) as a buffer and returns the handle. Throws
  // "[register_buffer]" for an empty, dotted or duplicate name or an undefined tensor.
  Tensor register_buffer(const std::string& name, const Tensor& t);

  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Parameters and buffers in state_dict order (see the top of this file).
  std::vector<std::pair<std::string, Tensor>> named_state() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

  // Sets training mode here and in every submodule (Dropout is active only in training).
  // Modules start in training mode.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops the accumulated gradient of every parameter.
  void zero_grad();

  // Moves every parameter and buffer of this module and its submodules to `device`, in place (as
  // PyTorch does): each parameter keeps its handle (so optimizers and callers holding it
  // see the move) and gets a copy of its values on `device` (Tensor::to, queued); its
  // accumulated gradient is dropped. Parameters already there are untouched (CPU -> CPU
  // queues nothing). Returns *this. Checks before changing anything, and throws "[to]"
  // naming the module and the device, with the module unchanged, when `device` cannot be
  // used here (no CUDA in this build, no such GPU, or no kernels for it). Does not wait.
  // Optimizer state made before the move stays where it was: create optimizers after.
  Module& to(Device device);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  enum class Which { parameters, buffers, state };
  void collect(const std::string& prefix, Which which,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void check_new_name(const std::string& name, const char* op) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Runs its modules in order; module i is registered under the name "i". An empty
// Sequential returns its input.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return children().size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return children().at(i).second; }
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
};

// Options for Linear with chainable setters: LinearOptions(784, 256).bias(false).
struct LinearOptions {
  LinearOptions(int64_t in, int64_t out) : in_features(in), out_features(out) {}
  int64_t in_features;
  int64_t out_features;
  TIDE_ARG_AS(bool, bias, with_bias) = true;
  TIDE_ARG_AS(Init, init, weight_init) = Init::xavier_uniform;
  TIDE_ARG(double, init_std) = 0.02;  // the std of Init::normal
  TIDE_ARG_AS(DType, dtype, param_dtype) = DType::float32;
};

// y = x @ W + b. The weight is stored as (in, out), not PyTorch's (out, in), so forward is
// a plain matmul(x, W) with no transpose; the bias (out) starts at zero. Input (N, in).
class Linear : public Module {
 public:
  // Throws "[Linear]" for non-positive sizes.
  explicit Linear(const LinearOptions& opt, Generator& gen = default_generator());
  Linear(int64_t in, int64_t out) : Linear(LinearOptions(in, out)) {}
  // Throws "[Linear]" naming the shapes unless x is (N, in) with the weight's dtype.
  Tensor forward(const Tensor& x) override;
  // forward, then `act` (ReLU or GELU's tanh form): with a bias, one `linear` op (the GEMM
  // with its bias and activation epilogue, on every device); without, matmul then the
  // activation. Sequential calls it for a Linear followed by a ReLU.
  Tensor forward_fused(const Tensor& x, Activation act);
  // The same, ReLU when relu_after.
  Tensor forward_fused(const Tensor& x, bool relu_after) {
    return forward_fused(x, relu_after ? Activation::relu : Activation::none);
  }
  std::string name() const override { return "Linear"; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  const LinearOptions& options() const { return opt_; }

 private:
  LinearOptions opt_;
  Tensor weight_, bias_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sigmoid"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Tanh"; }
};

// Inverted dropout through tide::dropout (ops/elementwise.h): in training, each element is
// kept with probability 1 - p (a Philox draw u ~ U[0,1) keeps it when u >= p) and kept values
// are scaled by 1 / (1 - p); in eval mode, and for p == 0, forward returns its input
// unchanged. forward throws "[dropout]" for a non-floating input.
class Dropout : public Module {
 public:
  // Throws "[Dropout]" unless 0 <= p < 1.
  explicit Dropout(double p = 0.5, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

}  // namespace tide::nn
