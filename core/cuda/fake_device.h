// A recording fake of a GPU (DeviceApi) for CPU tests of the CUDA backend's logic. Memory
// is host memory; each stream is a FIFO of operations that a thread of its own executes
// (the "GPU"), so work really runs asynchronously and in stream order; events and waits
// behave as CUDA's (a wait waits for the event's most recent record before the call).
// Every call is logged, so a test can count event records and waits per hazard, and it can
// hold a stream (pause), limit memory, and inject launch and sticky errors.
//
// "Kernels" are host functions: ops run their CPU implementations through launch_host
// (runs_host_kernels() is true), so the whole op library runs on a fake GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/device_api.h"

namespace tide::cuda {

class FakeDevice final : public DeviceApi {
 public:
  enum class CallKind : uint8_t {
    malloc,
    free,
    host_alloc,
    host_free,
    create_stream,
    record,
    wait,
    write_timeline,
    write_words,
    memcpy,
    launch_host,
    synchronize,
    graph_create,
    graph_node,
    graph_memcpy,
    graph_instantiate,
    graph_update,
    graph_set_memcpy,
    graph_launch,
    create_blas
  };
  struct Call {
    CallKind kind;
    StreamHandle stream = nullptr;
    EventHandle event = nullptr;
    size_t bytes = 0;
  };

  // `capacity`: device memory the fake pretends to have (malloc fails beyond it).
  explicit FakeDevice(size_t capacity = size_t(1) << 32, std::string name = "fake GPU");
  ~FakeDevice() override;

  // ---- test controls ----
  // Holds s: its queued operations wait until resume(s). Calls on s still queue.
  void pause(StreamHandle s);
  void resume(StreamHandle s);
  // The next last_error() on any thread reports `message` (a launch error), once.
  void fail_next_launch(std::string message);
  // From now on the device is dead: queued work stops, every query, synchronize and
  // last_error reports a sticky `message`, and malloc throws it as cudaMalloc would.
  void inject_sticky_error(std::string message);
  // The next graph_add_captured refuses its capture with `why`, as CUDA refuses a launch
  // it cannot capture; the one after captures again.
  void refuse_next_capture(std::string why);
  // Programmatic edges, as far as the executor sees them: while programmatic_edges_wanted()
  // (core/cuda/runtime.h), a kernel node (captured work, a loop's start or step kernel) is
  // joined that way to the kernel nodes among its deps, as on the device (counted in
  // programmatic_edges_added); copy and WHILE nodes only ever by ordinary edges. While
  // `on`, graph_instantiate refuses a graph holding such an edge, as CUDA may refuse one
  // where they are not allowed (a conditional node's body).
  void refuse_programmatic_graphs(bool on);
  // The order a graph launch runs independent nodes in (CUDA promises none, and runs them
  // at once): latest_first (the default: the node added last among the ready ones),
  // earliest_first, shuffled (a random ready node, from `seed`, new per launch), or
  // concurrent (every ready node at once, each on a thread of its own, in waves): a
  // missing edge then fails a value test in one of the orders, and races under TSan.
  enum class NodeOrder : uint8_t { latest_first, earliest_first, shuffled, concurrent };
  void set_node_order(NodeOrder order, uint64_t seed = 1);
  // A graph's nodes as built: per node its kind ('k': captured work, 'm': a copy, 's': a
  // loop's start kernel, 'w': a WHILE node, 'e': a loop's step kernel) and the number of
  // operations captured in it (of copies, for 's' and 'e'); edges as (from, to) node
  // indices; per WHILE node, in order, its body's shape.
  struct GraphShape {
    std::string kinds;
    std::vector<size_t> ops;
    std::vector<std::pair<int, int>> edges;
    std::vector<GraphShape> bodies;
  };
  GraphShape graph_shape(GraphHandle g) const;
  // The calls so far, in order; and how many of one kind (on one stream, if given).
  std::vector<Call> calls() const;
  size_t count(CallKind k, StreamHandle s = nullptr) const;
  void clear_calls();
  // Operations executed on s so far (all kinds).
  uint64_t executed(StreamHandle s) const;
  size_t bytes_in_use() const { return used_.load(); }

  // ---- DeviceApi ----
  std::string name() const override { return name_; }
  bool runs_host_kernels() const override { return true; }
  void* malloc(size_t bytes) override;
  void free(void* p) override;
  void* host_alloc(size_t bytes) override;
  void host_free(void* p) override;
  MemInfo mem_info() override;
  StreamHandle create_stream() override;
  void destroy_stream(StreamHandle s) override;
  EventHandle create_event() override;
  EventHandle create_timed_event() override { return create_event(); }
  float elapsed_ms(EventHandle a, EventHandle b) override;
  void destroy_event(EventHandle e) override;
  void record(EventHandle e, StreamHandle s) override;
  void wait(StreamHandle s, EventHandle e) override;
  void write_timeline(StreamHandle s, uint64_t* timeline, uint64_t value) override;
  void write_words(StreamHandle s, uint64_t* dst, std::span<const uint64_t> values) override;
  void memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind,
                    StreamHandle s) override;
  void launch_host(StreamHandle s, void (*fn)(void*), void* arg) override;
  Status synchronize(StreamHandle s) override;
  Status query(StreamHandle s) override;
  Status last_error() override;
  // Handle creation (cublasLtCreate's stand-in): logged, refused while the thread captures
  // as creating a library handle allocates; nullptr, since the fake has no cuBLASLt.
  void* create_blas() override;
  // Graphs (core/cuda/fake_graph.cpp): a captured node holds the operations its launch
  // queued; a launch runs the nodes one at a time, each after its deps, the latest-added
  // ready node first (a missing edge then shows as the wrong order).
  GraphHandle graph_create() override;
  void graph_destroy(GraphHandle g) override;
  GraphNodeHandle graph_add_captured(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                     const std::function<void(StreamHandle)>& launch,
                                     std::string* why) override;
  GraphNodeHandle graph_add_memcpy(GraphHandle g, std::span<const GraphNodeHandle> deps, void* dst,
                                   const void* src, size_t bytes, CopyKind kind) override;
  void graph_add_dependencies(GraphHandle g, std::span<const GraphNodeHandle> from,
                              GraphNodeHandle to) override;
  GraphExecHandle graph_instantiate(GraphHandle g, std::string* why) override;
  bool graph_exec_update(GraphExecHandle exec, GraphHandle g) override;
  void graph_exec_set_memcpy(GraphExecHandle exec, GraphNodeHandle node, void* dst, const void* src,
                             size_t bytes, CopyKind kind) override;
  void graph_launch(GraphExecHandle exec, StreamHandle s) override;
  void graph_exec_destroy(GraphExecHandle exec) override;
  size_t graph_node_count(GraphHandle g) override;
  bool graph_create_condition(GraphHandle g, ConditionalHandle* cond, std::string* why) override;
  GraphNodeHandle graph_add_while(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                  ConditionalHandle cond, GraphHandle* body,
                                  std::string* why) override;
  GraphNodeHandle graph_add_loop_start(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                       const LoopConditions& conds, int64_t* counter,
                                       const LoopCount& count, std::span<const LoopCopy> copies,
                                       const LoopRandom* random) override;
  GraphNodeHandle graph_add_loop_step(GraphHandle body, std::span<const GraphNodeHandle> deps,
                                      ConditionalHandle cond, int64_t threshold, int64_t* counter,
                                      int64_t iterations, std::span<const LoopCopy> copies,
                                      const LoopRandom* random) override;

 private:
  struct Event;
  struct Stream;
  struct Graph;
  struct GraphNode {  // fake_graph.cpp
    char kind = 'k';  // as in GraphShape::kinds
    std::vector<int> deps;
    std::vector<std::function<void()>> ops;  // a captured node
    bool copy = false;
    bool programmatic = false;  // joined to its deps by programmatic edges
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    // Loops: the WHILE node's body (an exec's own copy, own_bodies); the conditions (a step's:
    // cond, >= threshold) and counter the loop kernels set; their copies; the count.
    std::shared_ptr<Graph> body;
    ConditionalHandle cond = 0;
    LoopConditions conds;    // a start kernel's
    int64_t threshold = 1;   // a step kernel's
    int64_t iterations = 1;  // a step kernel's: what it takes off the counter
    int64_t* counter = nullptr;
    std::vector<LoopCopy> copies;
    LoopCount count;
    LoopRandom random;  // num_ops 0: none
  };
  struct Graph {
    std::vector<GraphNode> nodes;
    // An exec's graph, while it lives: CUDA re-points an exec's copy node through the node
    // of the graph it was instantiated from, a handle that dies with that graph.
    const Graph* source = nullptr;
  };
  GraphNodeHandle add_node(GraphHandle g, std::span<const GraphNodeHandle> deps, GraphNode node);
  static void own_bodies(Graph& exec);  // copies exec's WHILE bodies (deeply) into it
  // Marks kernel node `node` programmatic when the edges are wanted and kernel nodes are
  // among deps (of graph g), counting those edges.
  void join_programmatic(GraphHandle g, std::span<const GraphNodeHandle> deps, GraphNode& node);
  GraphNodeHandle add_loop_kernel(GraphHandle g, std::span<const GraphNodeHandle> deps,
                                  GraphNode node, std::span<const LoopCopy> copies,
                                  const LoopRandom* random);
  void log(Call c);
  void enqueue(StreamHandle s, std::function<void()> op);
  // What `launch` queues on a stream that captures instead of running (fake_graph.cpp).
  std::vector<std::function<void()>> capture(const std::function<void(StreamHandle)>& launch);
  Status sticky_status() const;

  const std::string name_;
  const size_t capacity_;
  std::atomic<size_t> used_{0};
  mutable std::mutex mu_;  // calls_, the allocation sizes, pending launch error
  std::vector<Call> calls_;
  std::vector<std::pair<void*, size_t>> blocks_;
  std::string launch_error_;
  std::atomic<bool> dead_{false};
  std::string sticky_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<std::unique_ptr<Graph>> graphs_;  // graphs and execs alike
  std::string refuse_capture_;
  bool refuse_programmatic_ = false;
  NodeOrder node_order_ = NodeOrder::latest_first;
  uint64_t order_seed_ = 1;
  ConditionalHandle next_cond_ = 1;
  // True while this thread runs a graph_add_captured launch. CUDA refuses calls that may
  // allocate or synchronise then (thread-local capture mode): the call fails and the
  // capture is invalidated. refused_in_capture(call) models that for one call.
  static inline thread_local bool tl_capturing = false;
  static inline thread_local const char* tl_invalidated_by = nullptr;
  static bool refused_in_capture(const char* call);
};

}  // namespace tide::cuda
