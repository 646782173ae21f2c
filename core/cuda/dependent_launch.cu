// Programmatic edges in a CUDA graph (core/cuda/dependent_launch.h). A captured node is a
// child graph; one that holds a single kernel of tide's is added as that kernel node
// instead, so that edges from the kernel nodes before it can be programmatic (CUDA joins
// only kernel nodes that way). Other kernels (cuBLAS, CUB, cuDNN) stay child graphs: they
// may read their inputs before any wait.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/dependent_launch.h"
#include "core/cuda/runtime.h"

namespace tide::cuda {

namespace {

std::mutex g_loaded_mu;
std::unordered_set<const void*> g_loaded;  // register_awaiting_kernel's

// Whether func is a kernel of tide's: one compiled into the object that holds this code
// (its host stub is there), or one loaded at run time and registered. Only those are given
// to cudaFuncGetName, which takes any other pointer for a cudaKernel_t handle (a kernel
// node of cuBLAS or cuDNN, which carry their own runtime).
bool is_tides(const void* func) {
  Dl_info mine{}, theirs{};
  if (dladdr(reinterpret_cast<const void*>(&is_tides), &mine) && dladdr(func, &theirs) &&
      mine.dli_fbase == theirs.dli_fbase)
    return true;
  std::lock_guard lock(g_loaded_mu);
  return g_loaded.count(func) > 0;
}

// tide's kernels (namespace tide, and the compiled chains' entry) all begin with
// await_prerequisite_grids; tests/core/test_kernel_prologues.cpp keeps it so. Its wait is
// compiled only for compute capability 9.0 and later: a kernel built from older PTX (a
// build for CMAKE_CUDA_ARCHITECTURES=80 run on an H100) does not wait, so it is not one.
bool awaits_prerequisites(const void* func) {
  if (!is_tides(func)) return false;
  const char* name = nullptr;
  cudaFuncAttributes attr{};
  if (cudaFuncGetName(&name, func) != cudaSuccess || !name ||
      cudaFuncGetAttributes(&attr, func) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const std::string_view n(name);
  return (n.starts_with("_ZN4tide") || n == "tide_chain") && attr.ptxVersion >= 90 &&
         attr.binaryVersion >= 90;
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

// Programmatic edges from the kernel nodes among deps; nullptr when CUDA refuses them (a
// driver without them, or a graph where they are not allowed) or there are none.
cudaGraphNode_t add_programmatic(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                 const cudaKernelNodeParams& k) {
  std::vector<cudaGraphEdgeData> edges(deps.size());
  size_t programmatic = 0;
  for (size_t i = 0; i < deps.size(); ++i) {
    std::memset(&edges[i], 0, sizeof edges[i]);
    if (!is_kernel_node(deps[i])) continue;
    edges[i].from_port = cudaGraphKernelNodePortProgrammatic;
    edges[i].type = cudaGraphDependencyTypeProgrammatic;
    ++programmatic;
  }
  if (programmatic == 0) return nullptr;
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeKernel;
  p.kernel.func = k.func;
  p.kernel.gridDim = k.gridDim;
  p.kernel.blockDim = k.blockDim;
  p.kernel.sharedMemBytes = k.sharedMemBytes;
  p.kernel.kernelParams = k.kernelParams;  // copied by the new node
  p.kernel.extra = k.extra;
  cudaGraphNode_t node = nullptr;
  if (cudaGraphAddNode(&node, g, reinterpret_cast<const cudaGraphNode_t*>(deps.data()),
                       edges.data(), deps.size(), &p) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  note_programmatic_edges(programmatic);
  return node;
}

// A kernel node after deps: programmatic edges when `programmatic` and CUDA takes them,
// else ordinary ones.
cudaGraphNode_t add_kernel(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                           const cudaKernelNodeParams& k, bool programmatic) {
  if (programmatic)
    if (cudaGraphNode_t node = add_programmatic(g, deps, k)) return node;
  cudaGraphNode_t node = nullptr;
  TIDE_CUDA_CHECK(cudaGraphAddKernelNode(
      &node, g, reinterpret_cast<const cudaGraphNode_t*>(deps.data()), deps.size(), &k));
  return node;
}

bool programmatic_here() { return programmatic_edges_wanted() && current_device_has_it(); }

}  // namespace

void register_awaiting_kernel(const void* func) {
  std::lock_guard lock(g_loaded_mu);
  g_loaded.insert(func);
}

cudaGraphNode_t add_kernel_after(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                 const cudaKernelNodeParams& k) {
  return add_kernel(g, deps, k, programmatic_here() && awaits_prerequisites(k.func));
}

cudaGraphNode_t add_dependent_kernel(cudaGraph_t g, std::span<const GraphNodeHandle> deps,
                                     cudaGraph_t child) {
  if (!programmatic_here()) return nullptr;
  // Any refusal here (a kernel node of another library, whose parameters the runtime may
  // not read back: cudaErrorInvalidDeviceFunction) keeps the child graph and its edges.
  size_t count = 0;
  cudaGraphNode_t only = nullptr;
  cudaGraphNodeType type{};
  cudaKernelNodeParams k{};
  if (cudaGraphGetNodes(child, nullptr, &count) != cudaSuccess || count != 1 ||
      cudaGraphGetNodes(child, &only, &count) != cudaSuccess ||
      cudaGraphNodeGetType(only, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
      cudaGraphKernelNodeGetParams(only, &k) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (!awaits_prerequisites(k.func)) return nullptr;
  return add_kernel(g, deps, k, true);
}

}  // namespace tide::cuda
