// Programmatic edges in a CUDA graph (core/cuda/dependent_launch.h). A captured node is a
// child graph; one that holds a single kernel of tide's is added as that kernel node
// instead, so that edges from the kernel nodes before it can be programmatic (CUDA joins
// only kernel nodes that way). Other kernels (cuBLAS, CUB, cuDNN) stay child graphs: they
// may read their inputs before any wait.
#include <cstring>
#include <string_view>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/dependent_launch.h"
#include "core/cuda/runtime.h"

namespace tide::cuda {

namespace {

// tide's kernels (namespace tide, and the compiled chains' entry) all begin with
// await_prerequisite_grids; tests/core/test_kernel_prologues.cpp keeps it so.
bool awaits_prerequisites(const void* func) {
  const char* name = nullptr;
  if (cudaFuncGetName(&name, func) != cudaSuccess || !name) {
    (void)cudaGetLastError();
    return false;
  }
  const std::string_view n(name);
  return n.starts_with("_ZN4tide") || n == "tide_chain";
}

// Programmatic dependent launch needs compute capability 9.0 (Hopper) or later.
bool current_device_has_it() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

bool is_kernel_node(GraphNodeHandle n) {
  cudaGraphNodeType t{};
  return cudaGraphNodeGetType(cudaGraphNode_t(n), &t) == cudaSuccess &&
         t == cudaGraphNodeTypeKernel;
}

}  // namespace

cudaGraphNode_t add_kernel_after(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                 const cudaKernelNodeParams& k) {
  const auto* from = reinterpret_cast<const cudaGraphNode_t*>(deps.data());
  if (programmatic_edges_enabled() && current_device_has_it()) {
    std::vector<cudaGraphEdgeData> edges(deps.size());
    size_t programmatic = 0;
    for (size_t i = 0; i < deps.size(); ++i) {
      std::memset(&edges[i], 0, sizeof edges[i]);
      if (!is_kernel_node(deps[i])) continue;
      edges[i].from_port = cudaGraphKernelNodePortProgrammatic;
      edges[i].type = cudaGraphDependencyTypeProgrammatic;
      ++programmatic;
    }
    cudaGraphNodeParams p{};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = k.func;
    p.kernel.gridDim = k.gridDim;
    p.kernel.blockDim = k.blockDim;
    p.kernel.sharedMemBytes = k.sharedMemBytes;
    p.kernel.kernelParams = k.kernelParams;  // copied by the new node
    p.kernel.extra = k.extra;
    cudaGraphNode_t node = nullptr;
    if (programmatic > 0 &&
        cudaGraphAddNode(&node, g, from, edges.data(), deps.size(), &p) == cudaSuccess) {
      note_programmatic_edges(programmatic);
      return node;
    }
    // Refused (a driver without these edges, or a graph where they are not allowed):
    // ordinary edges, as below.
    (void)cudaGetLastError();
  }
  cudaGraphNode_t node = nullptr;
  TIDE_CUDA_CHECK(cudaGraphAddKernelNode(&node, g, from, deps.size(), &k));
  return node;
}

cudaGraphNode_t add_dependent_kernel(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                     cudaGraph_t child) {
  if (!programmatic_edges_enabled() || !current_device_has_it()) return nullptr;
  size_t count = 0;
  TIDE_CUDA_CHECK(cudaGraphGetNodes(child, nullptr, &count));
  if (count != 1) return nullptr;
  cudaGraphNode_t only = nullptr;
  TIDE_CUDA_CHECK(cudaGraphGetNodes(child, &only, &count));
  cudaGraphNodeType type{};
  TIDE_CUDA_CHECK(cudaGraphNodeGetType(only, &type));
  if (type != cudaGraphNodeTypeKernel) return nullptr;
  cudaKernelNodeParams k{};
  TIDE_CUDA_CHECK(cudaGraphKernelNodeGetParams(only, &k));
  if (!awaits_prerequisites(k.func)) return nullptr;
  return add_kernel_after(g, deps, k);
}

}  // namespace tide::cuda
