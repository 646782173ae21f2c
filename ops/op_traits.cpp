#include "ops/op_traits.h"

#include <array>

namespace tide {

namespace {
using K = OpKind;
using F = kernels::FunctorId;
constexpr bool E = true, N = false;
// id, name, kind, elementwise, in_place, differentiable[, functor, mask, floating_only, half]
constexpr F none = F::count_;
constexpr std::array kTable{
    OpTraits{OpId::zeros, "zeros", K::creation, N, N, N, none, N, N, E},
    OpTraits{OpId::ones, "ones", K::creation, N, N, N, none, N, N, E},
    OpTraits{OpId::full, "full", K::creation, N, N, N, none, N, N, E},
    OpTraits{OpId::arange, "arange", K::creation, N, N, N, none, N, N, E},
    OpTraits{OpId::randn, "randn", K::creation, N, N, N},
    OpTraits{OpId::rand, "rand", K::creation, N, N, N},
    OpTraits{OpId::from_data, "from_data", K::creation, N, N, N, none, N, N, E},
    OpTraits{OpId::clone, "clone", K::creation, E, N, E, none, N, N, E},
    OpTraits{OpId::add, "add", K::elementwise, E, N, E, F::Add, N, N, E},
    OpTraits{OpId::sub, "sub", K::elementwise, E, N, E, F::Sub, N, N, E},
    OpTraits{OpId::mul, "mul", K::elementwise, E, N, E, F::Mul, N, N, E},
    OpTraits{OpId::div, "div", K::elementwise, E, N, E, F::Div, N, E, E},
    OpTraits{OpId::maximum, "maximum", K::elementwise, E, N, E, F::Maximum, N, N, E},
    OpTraits{OpId::eq, "eq", K::elementwise, E, N, N, F::Eq, E, N, E},
    OpTraits{OpId::gt, "gt", K::elementwise, E, N, N, F::Gt, E, N, E},
    OpTraits{OpId::lt, "lt", K::elementwise, E, N, N, F::Lt, E, N, E},
    OpTraits{OpId::relu_grad, "relu_grad", K::elementwise, E, N, N, F::ReluGrad, N, N, E},
    OpTraits{OpId::gelu_grad, "gelu_grad", K::elementwise, E, N, N, F::GeluErfGrad, N, E, E},
    OpTraits{OpId::gelu_tanh_grad, "gelu_tanh_grad", K::elementwise, E, N, N, F::GeluTanhGrad, N, E,
             E},
    // x and its uniform draw (ops/elementwise.h, dropout); differentiable in x.
    OpTraits{OpId::dropout, "dropout", K::elementwise, E, N, E, F::DropoutKeep, N, E},
    OpTraits{OpId::neg, "neg", K::elementwise, E, N, E, F::Neg, N, N, E},
    OpTraits{OpId::exp, "exp", K::elementwise, E, N, E, F::Exp, N, E, E},
    OpTraits{OpId::log, "log", K::elementwise, E, N, E, F::Log, N, E, E},
    OpTraits{OpId::sqrt, "sqrt", K::elementwise, E, N, E, F::Sqrt, N, E, E},
    OpTraits{OpId::abs, "abs", K::elementwise, E, N, E, F::Abs, N, N, E},
    OpTraits{OpId::pow, "pow", K::elementwise, E, N, E, F::Pow, N, E, E},
    OpTraits{OpId::relu, "relu", K::elementwise, E, N, E, F::Relu, N, N, E},
    OpTraits{OpId::sigmoid, "sigmoid", K::elementwise, E, N, E, F::Sigmoid, N, E, E},
    OpTraits{OpId::tanh, "tanh", K::elementwise, E, N, E, F::Tanh, N, E, E},
    OpTraits{OpId::gelu, "gelu", K::elementwise, E, N, E, F::GeluErf, N, E, E},
    OpTraits{OpId::gelu_tanh, "gelu_tanh", K::elementwise, E, N, E, F::GeluTanh, N, E, E},
    OpTraits{OpId::cast, "cast", K::elementwise, E, N, E, none, N, N, E},
    OpTraits{OpId::add_, "add_", K::elementwise, E, E, N, F::Add, N, N, E},
    OpTraits{OpId::sub_, "sub_", K::elementwise, E, E, N, F::Sub, N, N, E},
    OpTraits{OpId::mul_, "mul_", K::elementwise, E, E, N, F::Mul, N, N, E},
    // copy_ of a 16-bit tensor is a byte copy of the same shape (ops/elementwise.cpp).
    OpTraits{OpId::copy_, "copy_", K::elementwise, E, E, N, F::Second, N, N, E},
    OpTraits{OpId::sum, "sum", K::reduction, N, N, E, none, N, N, E},
    OpTraits{OpId::mean, "mean", K::reduction, N, N, E, none, N, N, E},
    OpTraits{OpId::max, "max", K::reduction, N, N, E, none, N, N, E},
    OpTraits{OpId::argmax, "argmax", K::reduction, N, N, N, none, N, N, E},
    OpTraits{OpId::sum_squares, "sum_squares", K::reduction, N, N, E, none, N, N, E},
    OpTraits{OpId::matmul, "matmul", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::transpose, "transpose", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::swap_axes, "swap_axes", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::softmax, "softmax", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::log_softmax, "log_softmax", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::linear, "linear", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::one_hot, "one_hot", K::linalg, N, N, N},
    OpTraits{OpId::cross_entropy, "cross_entropy", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::cross_entropy_grad, "cross_entropy_grad", K::linalg, N, N, N},
    OpTraits{OpId::take_rows, "take_rows", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::scatter_add_rows, "scatter_add_rows", K::linalg, N, N, E},
    // batch_norm also updates its running estimates in place in training: a side effect
    // on state, not on its differentiable inputs, so it is not marked in_place.
    OpTraits{OpId::conv2d, "conv2d", K::conv, N, N, E, none, N, N, E},
    OpTraits{OpId::conv2d_input_grad, "conv2d_input_grad", K::conv, N, N, N, none, N, N, E},
    OpTraits{OpId::conv2d_weight_grad, "conv2d_weight_grad", K::conv, N, N, N, none, N, N, E},
    OpTraits{OpId::max_pool2d, "max_pool2d", K::conv, N, N, E},
    OpTraits{OpId::max_pool2d_grad, "max_pool2d_grad", K::conv, N, N, N},
    OpTraits{OpId::avg_pool2d, "avg_pool2d", K::conv, N, N, E},
    OpTraits{OpId::avg_pool2d_grad, "avg_pool2d_grad", K::conv, N, N, N},
    OpTraits{OpId::batch_norm, "batch_norm", K::conv, N, N, E},
    OpTraits{OpId::batch_norm_grad, "batch_norm_grad", K::conv, N, N, N},
    OpTraits{OpId::layer_norm, "layer_norm", K::linalg, N, N, E, none, N, N, E},
    OpTraits{OpId::layer_norm_grad, "layer_norm_grad", K::linalg, N, N, N, none, N, N, E},
    OpTraits{OpId::scaled_dot_product_attention, "scaled_dot_product_attention", K::linalg, N, N, E,
             none, N, N, E},
    OpTraits{OpId::scaled_dot_product_attention_grad, "scaled_dot_product_attention_grad",
             K::linalg, N, N, N, none, N, N, E},
    OpTraits{OpId::reshape, "reshape", K::view, N, N, E, none, N, N, E},
    OpTraits{OpId::slice, "slice", K::view, N, N, E, none, N, N, E},
    OpTraits{OpId::select, "select", K::view, N, N, E, none, N, N, E},
    OpTraits{OpId::flatten, "flatten", K::view, N, N, E, none, N, N, E},
    OpTraits{OpId::fail, "fail", K::debug, N, N, N},
    OpTraits{OpId::gate, "gate", K::debug, N, N, N},
    OpTraits{OpId::sgd_update_, "sgd_update_", K::optimizer, N, E, N},
    OpTraits{OpId::adam_update_, "adam_update_", K::optimizer, N, E, N},
    OpTraits{OpId::increment_, "increment_", K::optimizer, N, E, N},
    OpTraits{OpId::warmup_cosine_lr_, "warmup_cosine_lr_", K::optimizer, N, E, N},
    OpTraits{OpId::to, "to", K::creation, N, N, E, none, N, N, E},
};
static_assert(kTable.size() == size_t(OpId::count_), "one row per OpId");
constexpr bool ordered() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (size_t(kTable[i].id) != i) return false;
  return true;
}
static_assert(ordered(), "rows in OpId order");
constexpr bool masks_follow_functors() {
  for (const OpTraits& t : kTable)
    if (t.mask != kernels::is_mask_functor(t.functor)) return false;
  return true;
}
static_assert(masks_follow_functors(), "an op is a mask exactly when its functor is one");
}  // namespace

const OpTraits& op_traits(OpId op) { return kTable[size_t(op)]; }
const char* op_name(OpId op) { return kTable[size_t(op)].name.data(); }
std::span<const OpTraits> all_ops() { return kTable; }
bool op_supports_dtype(OpId op, DType dtype) { return !is_half(dtype) || kTable[size_t(op)].half; }
bool has_elementwise_kernels(OpId op) {
  return kTable[size_t(op)].functor != kernels::FunctorId::count_ || op == OpId::cast;
}

}  // namespace tide
