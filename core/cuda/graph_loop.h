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
// A one-kernel node that makes `copies`, sets or advances the random ops' counters (when
// `random` is given; set when `count` is given), then sets *counter (the count when `count`
// is given, else *counter - 1) and the condition to (*counter > 0).
cudaGraphNode_t add_loop_kernel_node(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                     ConditionalHandle cond, int64_t* counter,
                                     const LoopCount* count, std::span<const LoopCopy> copies,
                                     const LoopRandom* random);

}  // namespace tide::cuda
