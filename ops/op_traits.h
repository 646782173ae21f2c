// The op table: one row per op with its traits (docs/contributing.md, The op table). Errors, the
// profiler and the tests read names and traits from here; a test walks the table to check that
// every op has a reference test and, when differentiable, a gradient check.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"
#include "ops/functor_id.h"

namespace tide {

enum class OpId : uint16_t {
  // creation
  zeros,
  ones,
  full,
  arange,
  randn,
  rand,
  from_data,
  clone,
  // elementwise, binary
  add,
  sub,
  mul,
  div,
  maximum,
  eq,
  gt,
  lt,
  relu_grad,
  gelu_grad,
  gelu_tanh_grad,
  dropout,
  // elementwise, unary
  neg,
  exp,
  log,
  sqrt,
  abs,
  pow,
  relu,
  sigmoid,
  tanh,
  gelu,
  gelu_tanh,
  cast,
  // in place (optimizers)
  add_,
  sub_,
  mul_,
  copy_,
  // reductions
  sum,
  mean,
  max,
  argmax,
  sum_squares,
  // linear algebra and rows
  matmul,
  transpose,
  swap_axes,
  softmax,
  log_softmax,
  linear,
  one_hot,
  cross_entropy,
  cross_entropy_grad,
  // gather (ops/gather.h)
  take_rows,
  scatter_add_rows,
  // convolutional networks (ops/conv.h)
  conv2d,
  conv2d_input_grad,
  conv2d_weight_grad,
  max_pool2d,
  max_pool2d_grad,
  avg_pool2d,
  avg_pool2d_grad,
  batch_norm,
  batch_norm_grad,
  // normalisation over the last dimension (ops/norm.h)
  layer_norm,
  layer_norm_grad,
  // attention (ops/attention.h)
  scaled_dot_product_attention,
  scaled_dot_product_attention_grad,
  // views (no kernel)
  reshape,
  slice,
  select,
  flatten,
  // test and demo helpers (ops/debug.h)
  fail,
  gate,
  // fused optimizer updates, the step counter and the learning-rate schedule (ops/optim.h)
  sgd_update_,
  adam_update_,
  increment_,
  warmup_cosine_lr_,
  // copies between devices (ops/copy.cpp: Tensor::to)
  to,
  count_  // keep last
};

enum class OpKind : uint8_t {
  creation,
  elementwise,
  reduction,
  linalg,
  view,
  debug,
  conv,      // convolution, pooling and normalisation over (N, C, ...) (ops/conv.h); CPU and CUDA
  optimizer  // fused in-place updates (ops/optim.h): several outputs, not for a fuser
};

struct OpTraits {
  OpId id;
  std::string_view name;
  OpKind kind;
  bool elementwise;     // one output element from the same-index input elements (fusable)
  bool in_place;        // writes one of its inputs
  bool differentiable;  // has a gradient (needs a finite-difference test)
  // Elementwise ops: the functor of ops/functors.h their kernels apply (add_ and sub_ with
  // an alpha other than 1 apply AddScaled); count_ for none (cast converts). Every listed
  // functor has CPU and CUDA kernels, so naming one is what gives an op its CUDA kernels.
  kernels::FunctorId functor = kernels::FunctorId::count_;
  bool mask = false;           // 0/1 in the input's dtype, float32 for integer inputs
  bool floating_only = false;  // refuses integer tensors ("[op] needs a floating tensor")
  // Accepts bfloat16 and float16 tensors (core/float16.h). The others refuse them at the call:
  // "[op] bfloat16 is not supported yet: cast to float32 first" (ops/op_util.h).
  bool half = false;
};

// Traits of op; the table is checked against the enum at compile time.
const OpTraits& op_traits(OpId op);
// The name of op, for errors and the profiler ("add", "matmul", ...). A C string literal.
const char* op_name(OpId op);
std::span<const OpTraits> all_ops();
// Whether the elementwise kernel files (ops/cpu/elementwise.cpp, ops/cuda/elementwise.cu)
// hold op's kernels: an op whose row names a functor, or cast (the conversions). CUDA
// registers exactly these; a CPU test checks that every elementwise row is one of them.
bool has_elementwise_kernels(OpId op);
// Whether `op` has a kernel for `device` in this process: every op on the CPU; on a GPU
// this process can use, the ops whose CUDA kernels are registered (ops/kernel_registry.cpp);
// false on a device the process does not have. Calling an op on
// an unsupported device throws "[op] has no CUDA kernel ..." before anything is queued.
bool op_supported(Device device, OpId op);
// Whether `op` accepts tensors of `dtype`: every op the non-16-bit dtypes it documents; the
// 16-bit storage types only where the op's row says `half`.
bool op_supports_dtype(OpId op, DType dtype);

}  // namespace tide
