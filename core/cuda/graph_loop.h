// The graph nodes of a counted loop on the real device (DeviceApi::graph_add_while,
// graph_add_loop_start, graph_add_loop_step; core/cuda/graph_loop.cu). For nvcc-compiled
// files only. Each throws "[cuda] <call> failed: ..." when CUDA refuses a node it should
// accept, except create_condition and add_while_node, which report a refusal in *why (a
// driver without conditional nodes).
#pragma once

#include <cuda_runtime.h>

#include <span>
#include <string>

#include "core/cuda/device_api.h"

namespace tide::cuda {

bool create_condition(cudaGraph_t g, ConditionalHandle* cond, std::string* why);
cudaGraphNode_t add_while_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                               ConditionalHandle cond, cudaGraph_t* body, std::string* why);
// The loop's kernel nodes (one kernel each): they make `copies` and set or advance the
// random ops' counters (when `random` is given), then
//   start: *counter = the count, conds.main = (count >= conds.unroll) and, when
//          conds.unroll > 1, conds.rest = (count > 0 and count % conds.unroll != 0);
//   step:  *counter -= iterations, cond = (*counter >= threshold); several iterations
//          only without random ops (device_api.h).
cudaGraphNode_t add_loop_start_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                    const LoopConditions& conds, int64_t* counter,
                                    const LoopCount& count, std::span<const LoopCopy> copies,
                                    const LoopRandom* random);
cudaGraphNode_t add_loop_step_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                   ConditionalHandle cond, int64_t threshold, int64_t* counter,
                                   int64_t iterations, std::span<const LoopCopy> copies,
                                   const LoopRandom* random);

}  // namespace tide::cuda
