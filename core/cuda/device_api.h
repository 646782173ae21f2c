// The device interface (docs/architecture.md, CUDA): every call tide's engine and allocator make to
// a GPU goes through it, so the backend's logic (hazard events, block reuse, error windows) is
// tested on the CPU against a recording fake (fake_device.h) and runs unchanged on the real
// CUDA runtime (cuda_api.cu, CUDA builds only). Kernels themselves are launched by the op
// kernels in ops/cuda/ on KernelContext::stream; this interface covers what surrounds them.
//
// Handles are opaque pointers (cudaStream_t, cudaEvent_t on the real device). Calls that
// cannot fail in a working process throw tide::Error("[cuda] <call>: <error>") when they
// do; calls whose failure is an outcome (out of memory, a launch error, an asynchronous
// error) report it in their result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/host_device.h"
#include "core/philox.h"

namespace tide::cuda {

using StreamHandle = void*;
using EventHandle = void*;
using GraphHandle = void*;           // cudaGraph_t: a graph being built
using GraphNodeHandle = void*;       // cudaGraphNode_t: a node of one graph (and of its execs)
using GraphExecHandle = void*;       // cudaGraphExec_t: an instantiated graph
using ConditionalHandle = uint64_t;  // cudaGraphConditionalHandle: a WHILE node's condition

enum class CopyKind : uint8_t { host_to_device, device_to_host, device_to_device };

// The outcome of a call that reports errors: ok, not ready (a query), or an error. A
// sticky error (an asynchronous fault: illegal address, ...) leaves the device unusable.
struct Status {
  enum Kind : uint8_t { ok, not_ready, error, sticky };
  Kind kind = ok;
  std::string message;  // "cudaErrorIllegalAddress: an illegal memory access was encountered"
  bool failed() const { return kind == error || kind == sticky; }
};

// A counted loop in a graph (graph_add_loop_start / graph_add_loop_step): copies its
// kernels make, and where the count comes from.
struct LoopCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
struct LoopCount {
  const void* tensor = nullptr;  // device memory holding the count (one element), or null
  DType dtype = DType::int64;    // the tensor's dtype (a float count is truncated)
  int64_t fixed = 0;             // the count when there is no tensor
};
// The conditions a loop's kernels set. An unrolled loop's body graph holds `unroll`
// iterations and runs while at least that many are left (`main`); the rest, fewer than
// `unroll`, run one per launch of a second WHILE node (`rest`, unroll > 1 only). A launch
// of a body graph costs the device more than a small body's nodes (an H200: ~3.5 us per
// WHILE iteration against ~1 us per kernel node), so small bodies run several iterations
// per launch.
struct LoopConditions {
  ConditionalHandle main = 0;
  ConditionalHandle rest = 0;
  int64_t unroll = 1;
};
// Copies one kernel of a loop may make (kernel parameters are passed by value).
inline constexpr size_t kMaxLoopCopies = 32;
// Random ops in a loop body: their Philox counters advance on the device. The start kernel
// sets op r's {offset, key} slot to {o + prefix[r], k}, the step kernel adds `blocks` to
// each offset, so iteration i, op r draws at o + i * blocks + prefix[r] (trace/loop.h's
// rule). With an int count (o, k) = the range base[0..1] the enclosing replay reserved;
// with a tensor count (0, substream_key(base[1], base[0])).
inline constexpr size_t kMaxLoopRandom = 8;
struct LoopRandom {
  const uint64_t* base = nullptr;  // device memory: {offset, key}, written by the replay
  bool substream = false;
  uint64_t blocks = 0;  // Philox blocks the body draws per iteration
  size_t num_ops = 0;   // at most kMaxLoopRandom
  uint64_t* slots[kMaxLoopRandom] = {};
  uint64_t prefix[kMaxLoopRandom] = {};
};
// What the start (start = true) and step kernels do to the counters, on the device and in
// the recording fake alike.
TIDE_HOST_DEVICE void advance_loop_random(const LoopRandom& r, bool start) {
  if (!start) {
    for (size_t i = 0; i < r.num_ops; ++i) r.slots[i][0] += r.blocks;
    return;
  }
  if (r.num_ops == 0) return;
  const uint64_t offset = r.substream ? 0 : r.base[0];
  const uint64_t key = r.substream ? philox::substream_key(r.base[1], r.base[0]) : r.base[1];
  for (size_t i = 0; i < r.num_ops; ++i) {
    r.slots[i][0] = offset + r.prefix[i];
    r.slots[i][1] = key;
  }
}

struct MemInfo {
  size_t free = 0, total = 0;
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // "NVIDIA H100 80GB HBM3 (cuda:0)", or the fake's name.
  virtual std::string name() const = 0;
  // True for a device whose "kernels" are host functions run in stream order (the fake):
  // the ops then use their CPU implementations on its (host) memory.
  virtual bool runs_host_kernels() const { return false; }

  // Makes this device current for the calling thread (cudaSetDevice; cached per thread).
  // The worker calls it before every task, so kernels launch on the right GPU.
  virtual void make_current() {}

  // ---- memory ----
  // Device memory, or nullptr when the device has no room (cudaErrorMemoryAllocation).
  virtual void* malloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  // Pinned, mapped host memory (staging, timelines), or nullptr when none is left.
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) = 0;
  // Free and total device memory (cudaMemGetInfo).
  virtual MemInfo mem_info() = 0;

  // ---- streams and events ----
  virtual StreamHandle create_stream() = 0;  // non-blocking: never syncs with the legacy stream
  virtual void destroy_stream(StreamHandle s) = 0;
  virtual EventHandle create_event() = 0;  // timing disabled
  // An event that records times (the profiler's), and the milliseconds from a's record to
  // b's once both are complete (cudaEventElapsedTime), else a negative number.
  virtual EventHandle create_timed_event() = 0;
  virtual float elapsed_ms(EventHandle a, EventHandle b) = 0;
  virtual void destroy_event(EventHandle e) = 0;
  // Marks the point after all work queued on s so far.
  virtual void record(EventHandle e, StreamHandle s) = 0;
  // Work queued on s after this waits for e's most recent record.
  virtual void wait(StreamHandle s, EventHandle e) = 0;

  // ---- work around the kernels ----
  // After all earlier work on s, writes `value` to *timeline (pinned host memory from
  // host_alloc) so the host sees the stream's progress without a driver call.
  virtual void write_timeline(StreamHandle s, uint64_t* timeline, uint64_t value) = 0;
  virtual void memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind,
                            StreamHandle s) = 0;
  // After all earlier work on s, writes `values` (at most kMaxWords) to device memory at
  // dst. The values travel as a kernel's arguments, so the caller's buffer may change at
  // once (a traced replay's random counters, written before its graph runs).
  static constexpr size_t kMaxWords = 32;
  virtual void write_words(StreamHandle s, uint64_t* dst, std::span<const uint64_t> values) = 0;
  // Runs fn(arg) on a host thread once all earlier work on s is done (cudaLaunchHostFunc);
  // later work on s waits for it to return. fn must not call the device. Captured into a
  // graph node, fn(arg) runs on every launch of the graph: arg must outlive the graph.
  virtual void launch_host(StreamHandle s, void (*fn)(void*), void* arg) = 0;

  // ---- completion and errors ----
  // Blocks until all work queued on s is done; its error if one happened.
  virtual Status synchronize(StreamHandle s) = 0;
  // Ready, not ready, or the device's error (cudaStreamQuery).
  virtual Status query(StreamHandle s) = 0;
  // The error of the last launch on this thread, cleared unless sticky (cudaGetLastError).
  virtual Status last_error() = 0;

  // ---- graphs (CUDA Graphs: the trace executor on a GPU) ----
  // Built explicitly, node by node, so that a graph's edges are exactly the ones given.
  // Calls that cannot fail in a working process throw "[cuda] ..."; what CUDA may refuse
  // (a capture, an instantiation) returns nullptr and says why in *why.
  virtual GraphHandle graph_create() = 0;
  virtual void graph_destroy(GraphHandle g) = 0;
  // Adds a node after `deps` that does what `launch` queues on the stream it is given: a
  // private stream capturing in thread-local mode (other threads keep launching), turned
  // into a child-graph node. nullptr when the capture was refused (a launch that cannot be
  // captured, an allocation during capture); an exception from `launch` propagates after
  // the capture ended.
  virtual GraphNodeHandle graph_add_captured(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                             const std::function<void(StreamHandle)>& launch,
                                             std::string* why) = 0;
  // Makes `to` wait for each node of `from` too (cudaGraphAddDependencies), all of g and
  // none already a dependency of `to`: an order found only once `to` was captured.
  virtual void graph_add_dependencies(GraphHandle g, std::span<const GraphNodeHandle> from,
                                      GraphNodeHandle to) = 0;
  // Adds a 1-D copy node after `deps`.
  virtual GraphNodeHandle graph_add_memcpy(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                           void* dst, const void* src, size_t bytes,
                                           CopyKind kind) = 0;
  // An executable graph of g (g may then be destroyed), or nullptr with *why.
  virtual GraphExecHandle graph_instantiate(GraphHandle g, std::string* why) = 0;
  // Gives exec the parameters of g, a graph of the same topology (cudaGraphExecUpdate);
  // false when CUDA refuses, and the caller instantiates g instead.
  virtual bool graph_exec_update(GraphExecHandle exec, GraphHandle g) = 0;
  // Points one memcpy node of exec at new memory (cudaGraphExecMemcpyNodeSetParams1D):
  // what changes from one replay to the next, without re-instantiating.
  virtual void graph_exec_set_memcpy(GraphExecHandle exec, GraphNodeHandle node, void* dst,
                                     const void* src, size_t bytes, CopyKind kind) = 0;
  // Queues one run of exec on s, after all earlier work on s.
  virtual void graph_launch(GraphExecHandle exec, StreamHandle s) = 0;
  virtual void graph_exec_destroy(GraphExecHandle exec) = 0;
  // The number of nodes in g (cudaGraphGetNodes).
  virtual size_t graph_node_count(GraphHandle g) = 0;

  // A counted loop without the host (CUDA conditional nodes): a start kernel node
  // sets the loop's counter and conditions (LoopConditions), a WHILE node runs its body
  // graph while its condition is non-zero (checked before every iteration, the first
  // included), and each iteration in a body graph ends with a step kernel. Conditions are 0
  // at every launch until the start kernel sets them. `counter` is 8 bytes of device memory
  // the loop owns. A count below zero runs no iteration (the kernels cannot throw; callers
  // check counts they know on the host).
  //
  // Creates the condition of a WHILE node of g (0 at every launch of g). false with *why
  // when CUDA refuses (a driver without conditional nodes).
  virtual bool graph_create_condition(GraphHandle g, ConditionalHandle* cond, std::string* why) = 0;
  // Adds a WHILE node on `cond` after deps. *body is its body graph, owned by the node
  // (add nodes to it; never destroy it). nullptr with *why when CUDA refuses.
  virtual GraphNodeHandle graph_add_while(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                          ConditionalHandle cond, GraphHandle* body,
                                          std::string* why) = 0;
  // Adds the start kernel after deps: makes `copies` (the initial state), sets the random
  // ops' first counters (when `random` is given), then *counter = the count, conds.main =
  // (count >= conds.unroll) and, when conds.unroll > 1, conds.rest = (count > 0 and
  // count % conds.unroll != 0). At most kMaxLoopCopies copies.
  virtual GraphNodeHandle graph_add_loop_start(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                               const LoopConditions& conds, int64_t* counter,
                                               const LoopCount& count,
                                               std::span<const LoopCopy> copies,
                                               const LoopRandom* random) = 0;
  // Adds a step kernel to a body graph after deps: makes `copies` (the next state into the
  // state), advances the random ops' counters (when `random` is given), then *counter -=
  // iterations (the iterations it completes: 1, or an unrolled body's count when its
  // iterations pass the state on without a step each; then `random` must be null) and
  // cond = (*counter >= threshold). At most kMaxLoopCopies copies.
  virtual GraphNodeHandle graph_add_loop_step(GraphHandle body,
                                              std::span<const GraphNodeHandle> deps,
                                              ConditionalHandle cond, int64_t threshold,
                                              int64_t* counter, int64_t iterations,
                                              std::span<const LoopCopy> copies,
                                              const LoopRandom* random) = 0;

  // ---- libraries ----
  // A cuBLASLt handle for one stream, or nullptr where there is no cuBLASLt (the fake).
  virtual void* create_blas() { return nullptr; }
  virtual void destroy_blas(void* /*handle*/) {}
};

}  // namespace tide::cuda
