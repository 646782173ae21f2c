// A traced trace::loop's node, the device-neutral part (trace/loop.cpp records the body;
// each backend adds the node: trace/backend.h): the count, the recorded body and its
// state, and the rules both backends follow for the body's random numbers and for the
// memory it reads and writes outside itself. Not a public header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/source_location.h"
#include "core/tensor.h"
#include "trace/fusion.h"
#include "trace/graph.h"

namespace tide::trace {

// A loop's count: fixed, or a tensor read when the loop runs.
struct LoopCount {
  int64_t fixed = 0;
  Tensor tensor;  // defined: read when the loop runs
};

// What a backend's loop node gets: the body recorded, fused (one node per op at most) and
// planned; the body's state placeholders (slots the node binds per iteration); the
// initial state; and, for a one-state body that is a single fused chain reading the state
// and writing the next one, that chain (null otherwise: see iterable).
struct LoopNode {
  LoopCount count;
  std::shared_ptr<Graph> body;
  std::vector<Storage*> body_inputs;
  std::vector<Tensor> state;
  std::shared_ptr<BoundChain> iterated;
  tide::SourceLocation site;
};

// The chain a one-state loop may iterate in place (all iterations per element in
// registers), or null.
std::shared_ptr<BoundChain> iterable(const Graph& body, const std::vector<Storage*>& inputs,
                                     const std::vector<Tensor>& state);

// The generator a tensor-count loop body's sub-stream comes from: that of its random ops of
// more than zero elements (nullptr: none). Throws "[loop]" for two.
Generator* substream_generator(const Graph& body);

// Random ops in the body, iteration i, op j drawing at base + i * S + prefix_j. A tensor
// count: one block reserved by the enclosing replay in eager order, the base 0 of the
// sub-stream it keys. An int count: one range of counters for all n iterations, reserved
// by the enclosing replay in eager order. No generator: nothing to reserve.
struct BodyRandom {
  Generator* gen = nullptr;
  std::vector<uint64_t> prefix;  // per random op of the body
  uint64_t blocks = 0;           // S
  bool substream = false;
  // Elements' worth of counters the enclosing replay reserves for the loop.
  uint64_t reserved_numel(const LoopCount& count) const {
    return substream ? 4 : uint64_t(count.fixed) * blocks * 4;
  }
};
// Throws "[loop]" when an int-count body draws from two generators.
BodyRandom plan_body_random(const Graph& body, const LoopCount& count);

// What the body reads and writes outside itself (captures, state), for the loop node.
void add_body_externals(const Graph& b, std::vector<Storage*>& reads,
                        std::vector<Storage*>& writes);

}  // namespace tide::trace
