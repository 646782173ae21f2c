// The GPU executor of a trace (docs/traced.md, On a GPU): a planned graph on a GPU becomes one CUDA
// graph, built explicitly at its first replay and launched as one engine task per call.
//   - Inputs and outputs get fixed buffers of their own (intermediates already have the
//     planner's arena), so every node's addresses are fixed before anything is captured,
//     and nothing allocates during capture.
//   - Each planned node is captured on a private stream (thread-local capture mode, so
//     other workers keep launching) and added as a child-graph node; its edges are the
//     trace's dependency edges. A copy node per input copies the argument into its fixed
//     buffer before the roots (none for an argument no node reads or writes: the replay
//     does not keep it alive); a copy node per output copies the fixed buffer into a fresh
//     tensor after the sinks, so an output a user keeps is never overwritten by a later
//     replay.
//   - Per call only the copy nodes' pointers change (graph_exec_set_memcpy), never the
//     instantiation. A new signature's graph reuses an evicted signature's exec when CUDA
//     can update it in place (trace/cuda/exec_recycler.h), else it is instantiated.
//   - The captured kernels get a workspace of the graph's own (cuBLASLt, CUB): a stream's
//     would be shared with eager work on that stream while the graph runs on another.
//     Nodes that used it (use_workspace, core/kernel_context.h) get one more edge each,
//     from the previous such node: independent branches run at once, and two of them
//     writing one workspace gave wrong, varying results (an H100, 2026-11-26).
//   - When CUDA refuses a capture or an instantiation, or a kernel cannot be captured (it
//     needs more workspace than the graph's), the replay launches the nodes one by one on
//     the stream instead, and stats() says why.
//   - A node with a piece (a trace::loop: trace/cuda/device_loop.h) adds its own nodes instead
//     of being captured: a WHILE node with the loop's body graph inside.
//   - Random ops read their Philox counters from device memory, which each replay writes
//     (in eager order, as on the CPU) before its graph runs: a replay draws what eager
//     would, and every replay draws new numbers.
//   - verify (trace/cpu/verify.h): the same bindings launched node by node, then as the graph.
//   - Fused nodes launch their chain's step-interpreter kernel (trace/cuda/device_fusion.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/device_api.h"
#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "trace/cuda/exec_recycler.h"
#include "trace/graph.h"
#include "trace/replay.h"

namespace tide::trace {

// A node that adds its own nodes to a CUDA graph (Node::piece).
struct GraphPiece {
  virtual ~GraphPiece() = default;
  // Adds the node's part to h after `deps`, with ctx as the capture context (its api,
  // workspace, host functions). Returns "" and, in *exits, the nodes its successors wait
  // for; or why it cannot (a refusal: the replay then launches node by node).
  virtual std::string add_to(cuda::GraphHandle h, std::span<const cuda::GraphNodeHandle> deps,
                             const KernelContext& ctx,
                             std::vector<cuda::GraphNodeHandle>* exits) = 0;
  // Uploads the fused chains inside the piece (a loop's body), adds them to *compiled and
  // sets *fallback to why one runs interpreted (trace/cuda/device_fusion.h). Called once the
  // enclosing graph is planned and prepared: a chain fixes the addresses of the values it
  // reads there (an argument's fixed buffer, an intermediate's place in the arena).
  virtual void prepare_chains(int* compiled, std::string* fallback) {}
};

struct DeviceGraphStats {
  bool built = false;      // the first replay ran (and tried to build)
  size_t graph_nodes = 0;  // nodes of the CUDA graph (0 when it fell back)
  std::string fallback;    // why the nodes are launched one by one ("" with a graph)
  // Why CUDA refused the graph with programmatic edges, so that it has ordinary ones.
  std::string ordinary_edges_because;
};

struct DeviceGraph {
  DeviceGraph() = default;
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  DeviceGraphStats stats() const;
  // Bytes of the fixed buffers and the workspace (set at the trace, never changed).
  size_t held_bytes() const;

  cuda::DeviceApi* api = nullptr;
  cuda::GraphExecHandle exec = nullptr;
  // The graph exec was instantiated from, kept for exec's life: cudaGraphExecMemcpyNode-
  // SetParams1D takes the copy nodes of that graph, which die with it (cudaErrorInvalidValue).
  cuda::GraphHandle graph = nullptr;
  std::vector<cuda::GraphNodeHandle> copy_in;  // per g.inputs entry (nullptr: empty, none)
  // Per g.inputs entry, the copy of its fixed buffer back into the argument, when the graph
  // writes that input in place (nullptr: it does not, or it is empty).
  std::vector<cuda::GraphNodeHandle> copy_back;
  std::vector<cuda::GraphNodeHandle> copy_out;  // per output value with a fixed buffer (idem)
  std::vector<int> out_values;                  // their value ids
  std::vector<StorageRef> fixed;                // input and output buffers, kept
  StorageRef workspace;                         // the captured kernels' scratch (a GPU's)
  cuda::HostFunctions host_functions;           // host nodes (a fake's kernels) run per launch
  // Where the exec goes when this graph does (a function's evicted signature), and where
  // the build looks for one to update first; null: instantiated, destroyed with the graph.
  std::shared_ptr<ExecRecycler> recycler;
  // Whether an update can reuse exec (no WHILE node in it): only then is it given to the
  // recycler, where a loop's exec would only crowd out a spare an update could take.
  bool updatable = false;
  mutable std::mutex mu;  // stats_ (read by FunctionCore::stats)
  DeviceGraphStats stats_;
};

// After planning a graph on a GPU: gives every input and output value a fixed buffer of
// its own on the device and creates g.device_graph (built at the first replay).
void prepare_device_graph(Graph& g);

// Adds g's planned nodes to h (a graph, or a loop's body): roots after `roots_after`,
// every other node after its trace predecessors (and, when it used the workspace, after
// the previous node that did), each node captured with ctx (the graph's workspace and host
// functions set) or added by its piece (after the last workspace user in any case). Returns "" and
// the nodes nothing in g waits for in *sinks (roots_after when g has no nodes), or why it cannot (a
// capture CUDA refused, or a kernel that failed while captured).
std::string add_planned_nodes(const Graph& g, cuda::GraphHandle h,
                              std::span<const cuda::GraphNodeHandle> roots_after,
                              const KernelContext& ctx, std::vector<cuda::GraphNodeHandle>* sinks);
// Launches g's planned nodes one by one on ctx.stream, in program order (no graph). Rethrows
// a node's error as node_failure() words it. Does not wait.
void launch_planned_nodes(const Graph& g, const KernelContext& ctx);
// ctx for capturing g's kernels: its DeviceGraph's workspace (a GPU's) and host functions.
KernelContext capture_context(const KernelContext& ctx, DeviceGraph& dg);
// A device-to-device copy node of `bytes` after `deps`, or nullptr when bytes is 0 (CUDA
// refuses zero-length copy nodes; an empty value has nothing to copy).
cuda::GraphNodeHandle add_copy_node(cuda::DeviceApi& api, cuda::GraphHandle h,
                                    std::span<const cuda::GraphNodeHandle> deps, void* dst,
                                    const void* src, size_t bytes);

// How submit_replay launches: the CUDA graph (built at the first such launch), or the nodes
// one by one on the stream (verify's reference; the graph's fallback).
enum class Launch { graph, nodes };
// Queues the replay task of one call's bindings (prepare_call) on the calling thread's
// current stream of g.device. Does not wait.
void submit_replay(const std::shared_ptr<Graph>& g, CallBindings c, Launch how,
                   tide::SourceLocation site);

// Queues one replay of g (g.device is a GPU) with `args` bound to g.inputs, as replay()
// does on the CPU: one engine task on the calling thread's current stream of g.device,
// which builds the CUDA graph on first use and launches it. Returns fresh output tensors.
// Adds the bytes of the fresh outputs to *allocated. Does not wait; a failure of the
// build or of a node surfaces at the next sync on the outputs.
std::vector<Tensor> replay_graph(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                                 tide::SourceLocation site, size_t* allocated = nullptr);

// Whether args share memory with each other or with a value g captured, where g writes
// one of them in place. A GPU graph copies each argument into a fixed buffer of its own
// (and back when written), so it would split what eager shares: such a call is run
// eagerly instead (trace::function), to give eager's results.
bool aliases_written_memory(const Graph& g, std::span<const Tensor> args);

// trace::function's verify mode on a GPU (trace/cuda/device_verify.cpp), as the CPU's
// (trace/cpu/verify.h): one call's bindings (the same inputs and
// random counters) launched node by node on the stream, then, with the persistent values
// it wrote restored, as the CUDA graph. Compares what each run leaves: the outputs and
// the persistent values written (intermediates share the arena and are overwritten inside
// the graph, so they cannot be compared). Waits for all queued work before and after.
// Returns the graph run's outputs; its effects count once. Throws tide::Error("[trace]
// verify: ...") naming the node that last wrote the first differing value (the earliest
// such node in program order).
std::vector<Tensor> verify_graph(const std::shared_ptr<Graph>& g, std::span<const Tensor> args,
                                 tide::SourceLocation site);

}  // namespace tide::trace
