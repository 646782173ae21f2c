// A traced trace::loop on a GPU (docs/traced.md, On a GPU): the loop node of a trace becomes, in
// the enclosing CUDA graph, a start kernel, a conditional WHILE node and copy nodes:
//
//   start kernel: copies the initial state into the body's state buffers, reads the count
//                 (an int, or a tensor read on the device) into a counter, sets the
//                 conditions (main: count >= u; rest: count % u != 0)
//   WHILE (main):  u iterations, each: the body's planned nodes (captured, with the
//                  trace's edges)
//                  -> copy nodes for states the body returns from another state
//                  -> step kernel: copies the next state into the state buffers,
//                     decrements the counter, sets main to counter >= u
//                  or, when the iterations can be chained (below), u iterations that
//                  pass the state on directly, then one step kernel for all u
//   WHILE (rest):  one iteration (the same nodes), its step setting rest to counter > 0
//                  (only when u > 1)
//   copy nodes:   the state buffers into the loop node's outputs
//
// u, the unroll: the device pays more to launch a body graph than to run a small body's
// nodes, so a small body runs u iterations per launch (chosen so that a launch runs about
// kLoopNodesPerLaunch nodes, at most kMaxLoopUnroll iterations, one for a body with a
// loop inside) and the remaining fewer than u run one per launch.
// trace::Options::loop_unroll overrides the choice.
//
// No iteration and no tensor count costs a host synchronisation. Random ops in the body
// draw eager's numbers: the start and step kernels set and advance their counters on the
// device (cuda::LoopRandom). Launched node by node instead (when the enclosing graph fell
// back), the loop reads a tensor count and the random base on the host (it synchronises
// the stream once), writes each iteration's counters and launches the body's nodes n times.
//
// Chained iterations: an iteration on its own needs the step kernel to copy the next
// state into the state buffers, which doubles the nodes of a body of one op. Where each
// state's next value is a value the body returns, of the state's size (not a state, a
// view or another state's result; it has a buffer of its own), and no random op, fused
// chain (its addresses are uploaded, not captured) or inner loop is in the body, the
// unrolled iterations are captured with their bindings alternated instead: even
// iterations read the state buffers and write the next states' buffers, odd ones the
// other way round. The one step kernel after them takes u off the counter and, for an
// odd u, copies the states back into the state buffers. No memory is added.
//
// A body that is one fused chain on its one state (Fusion::elementwise; see
// LoopNode::iterated, trace/loop_node.h) runs instead as one kernel that applies the chain n
// times per element, the state in place, the count read on the device:
//   copy node (initial state) -> chain kernel (n iterations) -> copy node (the output)
//
// A count below zero: the node-by-node launch throws "loop count must be >= 0" as on the
// CPU; inside a CUDA graph the kernels cannot throw, so the loop runs no iteration (nor
// does the one-kernel form, which reads the count on the device in both launches).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/storage.h"
#include "trace/cuda/device_fusion.h"
#include "trace/cuda/device_graph.h"
#include "trace/graph.h"
#include "trace/loop_node.h"

namespace tide::trace {

class Recorder;

// The automatic unroll: iterations per body launch until it runs about this many nodes.
inline constexpr int kLoopNodesPerLaunch = 32;
inline constexpr int kMaxLoopUnroll = 16;
// The iterations per body launch of a body of `body_nodes` planned nodes; `requested` > 0
// (trace::Options::loop_unroll) is taken as it is. A body holding a loop of its own gets 1:
// its inner WHILE nodes are work enough per launch, and unrolling both would multiply the
// graph's size.
int loop_unroll_for(size_t body_nodes, bool nested_loop, int requested);

struct LoopState {
  Storage* in;       // the initial state (a value of the enclosing graph)
  size_t in_offset;  // bytes into it
  Storage* out;      // the loop node's result
  size_t bytes;
};

class DeviceLoop final : public GraphPiece {
 public:
  // `body`: recorded, planned and prepared (prepare_device_graph) on the GPU, its chains
  // not yet uploaded (prepare_chains); its inputs are the state placeholders, its outputs
  // the next state, in order. `count`: the storage holding the count (one element of
  // count_dtype at count_offset elements), or null for `fixed`. `iterated`: the body's one
  // chain, to be bound in place to the state buffer (the one-kernel form). Allocates the counter
  // (and spare buffers) on the device. `random`: the body's random ops (num_ops 0: none), their
  // counters set and advanced by the loop kernels. `unroll`: trace::Options::loop_unroll (0:
  // loop_unroll_for's choice).
  DeviceLoop(std::shared_ptr<Graph> body, std::vector<LoopState> state, Storage* count,
             DType count_dtype, int64_t count_offset, int64_t fixed,
             std::shared_ptr<BoundChain> iterated = nullptr, cuda::LoopRandom random = {},
             int unroll = 0);

  std::string add_to(cuda::GraphHandle h, std::span<const cuda::GraphNodeHandle> deps,
                     const KernelContext& ctx, std::vector<cuda::GraphNodeHandle>* exits) override;
  // Uploads the body's fused chains and the iterated chain, and counts them.
  void prepare_chains(int* compiled, std::string* fallback) override;
  // The loop launched node by node on ctx.stream (see above).
  void launch(const KernelContext& ctx) const;

 private:
  void* state_buffer(size_t j) const;          // the body's input j (its fixed buffer)
  const void* initial_source(size_t j) const;  // where the initial state j is
  const void* next_source(size_t j) const;     // where the body leaves the next state j
  const void* count_address() const;
  kernels::FusedChain iterated_args() const;  // the chain with this loop's count
  // ctx for capturing the body's kernels: the body's workspace, the enclosing graph's host
  // functions.
  KernelContext body_context(const KernelContext& ctx) const;
  // Adds `iterations` iterations to a WHILE node's body graph, each ending with a step
  // kernel that sets cond to (counter >= threshold). "" or why CUDA refused.
  std::string add_iterations(cuda::GraphHandle body, int64_t iterations,
                             cuda::ConditionalHandle cond, int64_t threshold,
                             const KernelContext& ctx);
  // Whether the main WHILE node's iterations can be chained (see above).
  bool chainable() const;
  // The same as add_iterations for chained iterations: one step kernel after them all.
  std::string add_chained_iterations(cuda::GraphHandle body, int64_t iterations,
                                     cuda::ConditionalHandle cond, int64_t threshold,
                                     const KernelContext& ctx);

  std::shared_ptr<Graph> body_;
  std::vector<LoopState> state_;
  Storage* count_;
  DType count_dtype_;
  int64_t count_offset_, fixed_;
  std::shared_ptr<BoundChain> iterated_kernel_;  // until prepare_chains uploads it
  std::shared_ptr<DeviceChain> iterated_;
  cuda::LoopRandom random_;
  int unroll_;                     // iterations per launch of the main WHILE node's body
  StorageRef counter_;             // int64 on the device: iterations left
  std::vector<StorageRef> spare_;  // per state: where a next state read from another
                                   // state's buffer waits (null when not needed)
  bool chained_ = false;           // the main WHILE node's iterations are chained
};

// On a GPU: records n's loop node into `outer` as a WHILE node of the enclosing CUDA graph
// (launched node by node, it runs the body's kernels n times) and returns the loop's
// results. Throws "[loop]" for a body with more than kMaxLoopRandom random ops.
std::vector<Tensor> add_device_loop(Recorder& outer, LoopNode n);

}  // namespace tide::trace
