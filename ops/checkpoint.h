// Activation recomputation in eager mode (docs/checkpoint.md): checkpoint(fn, inputs) runs fn
// without recording, so none of its intermediates is kept for backward, and attaches one node
// to its output that keeps only the inputs. backward() through that node runs fn again with
// recording on (the recompute) and back-propagates the output's gradient through the graph
// it made: the inputs get their gradients through the node, and every parameter fn read
// gets its gradient accumulated into .grad, as without checkpointing. The recompute is
// ordinary ops, so it is recorded like any others inside a traced training step.
//
// Random numbers: every random op inside fn draws the same Philox counters in the recompute
// as in the first run, whichever generator it draws from (the default one, one passed to a
// module or an op): the first run records the counters each draw got (core/random_tape.h)
// and the recompute takes them back, advancing no generator. So results and gradients are
// bitwise those of the same code without checkpoint, on every device, eager and traced,
// whenever every use of fn's inputs and parameters is inside fn (a tensor also used outside
// gets the same gradient summed in another order, equal up to float rounding).
//
// Rules: fn must compute the same thing when it runs again: the same ops on the same shapes,
// the same random draws (its modules in the same train/eval mode), no in-place change of
// its inputs or parameters between forward and backward. A tensor fn reads that requires
// grad must be a leaf (a parameter) or one of the inputs; an intermediate of the enclosing
// graph read by capture is refused at backward. Not here: several outputs, a second
// backward through the recomputed graph (double backward).
//
// Selective recomputation (CheckpointOptions, ops/checkpoint_options.h): the first run may
// keep the outputs of the GEMMs and attentions the options name; the recompute takes them
// instead of running those ops again (ops/checkpoint_keep.h), with the same bits.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "ops/checkpoint_options.h"

namespace tide {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// fn(inputs), recomputed during backward instead of keeping its intermediates (above).
// `params`: tensors fn reads by capture (its parameters); they are not passed to fn, and
// they only decide whether a node is needed when no input requires grad, so that the
// parameters of a first layer fed with data still get their gradients.
// Without recording (NoGrad) or when neither an input nor a param requires grad, it only
// returns fn(inputs), with no node and no recompute. Otherwise the node keeps a copy of fn
// until backward: what fn captures by reference must live until then.
// Throws "[checkpoint]" at the call for an empty fn, an undefined input, inputs on
// different devices, or fn returning an undefined or non-floating tensor; fn's own errors
// propagate. At backward (from Tensor::backward) it throws "[checkpoint]" when the recompute
// returns another shape, dtype or device, draws other random numbers than the first run, or
// reaches a tensor computed outside fn that requires grad; and "[backward]" on a second
// backward through it without retain_graph, as every freed node does.
// Queued like the ops fn runs; waits for nothing.
// `options`: what the first run keeps for the recompute (default: nothing). At backward it
// also throws "[checkpoint]" when the recompute's kept ops differ from the first run's.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& params = {}, const CheckpointOptions& options = {});
// The same for a function of one tensor.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const std::vector<Tensor>& params = {}, const CheckpointOptions& options = {});

}  // namespace tide
