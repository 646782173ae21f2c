// Fusion on a GPU (docs/traced.md, On a GPU): a trace's fused node (trace/fusion.h) becomes one
// step-interpreter kernel (ops/fused_chain.h) whose program, the chain's steps with their
// memory operands resolved to the trace's fixed addresses, is uploaded to the device once
// when the trace is prepared. Captured into the CUDA graph like any kernel.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "core/tensor.h"
#include "ops/fused_chain.h"
#include "trace/fusion.h"
#include "trace/graph.h"

namespace tide::trace {

struct DeviceChain {
  Tensor program;            // the steps, on the device
  kernels::FusedChain args;  // points at them; iterations 1, no count
  // Why args.compiled is null and the interpreter runs the chain ("" when compiled): NVRTC
  // missing, its error, compilation switched off (kernels::compiled_chains_enabled), or a
  // host-kernel fake device.
  std::string interpreted_because;
};

// The chain of fk on `device`, its memory operands at their storages' current addresses
// (or at redirect[storage] where given: a loop body's state bound in place). Uploads the
// program and waits for the upload. On a CUDA device the chain is also compiled with NVRTC
// (ops/chain_compiler.h; cached per shape of chain) unless that is switched off; a chain
// that does not compile runs interpreted, with the same results. Call with the addresses
// final (after planning and prepare_device_graph).
std::shared_ptr<DeviceChain> upload_chain(
    const BoundChain& fk, Device device,
    const std::unordered_map<const Storage*, void*>& redirect = {});

// Launches a chain inside a running task on ctx's device: the CUDA kernel, or the host
// interpreter in stream order on a host-kernel fake. Does not wait.
void launch_chain(const KernelContext& ctx, const kernels::FusedChain& c);

// Gives every fused node of g (planned, prepared for its GPU) a kernel that launches its
// chain on the device, prepares the chains of its loop bodies (GraphPiece::prepare_chains)
// and counts in g how many of them run compiled. Waits for the uploads.
void prepare_device_fusion(Graph& g);

}  // namespace tide::trace
