#include "trace/cuda/device_loop.h"

#include <algorithm>
#include <stdexcept>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "core/engine/capture.h"
#include "core/error.h"
#include "core/loop_count.h"
#include "core/philox.h"
#include "trace/recorder.h"
#include "trace/replay.h"

namespace tide::trace {

using cuda::CopyKind;
using cuda::GraphHandle;
using cuda::GraphNodeHandle;
using cuda::LoopCopy;

DeviceLoop::DeviceLoop(std::shared_ptr<Graph> body, std::vector<LoopState> state, Storage* count,
                       DType count_dtype, int64_t count_offset, int64_t fixed,
                       std::shared_ptr<BoundChain> iterated, cuda::LoopRandom random, int unroll)
    : body_(std::move(body)),
      state_(std::move(state)),
      count_(count),
      count_dtype_(count_dtype),
      count_offset_(count_offset),
      fixed_(fixed),
      iterated_kernel_(std::move(iterated)),
      random_(random),
      unroll_(loop_unroll_for(body_->nodes.size(), body_->has_pieces(), unroll)) {
  // An int count below the unroll: the main WHILE node would never run.
  if (!count_) unroll_ = int(std::clamp<int64_t>(fixed_, 1, unroll_));
  TIDE_ASSERT(body_->device_graph && body_->inputs.size() == state_.size() &&
                  body_->outputs.size() == state_.size(),
              "trace: a GPU loop's body must be prepared with one input and output per state");
  tide::detail::CapturePause pause;  // real allocations, also while the enclosing trace records
  Allocator& al = Allocator::get(body_->device);
  counter_ = al.allocate(sizeof(int64_t), "loop");
  for (size_t j = 0; j < state_.size(); ++j) {
    // A next state read from a state buffer (the body returns a state, or a view of one,
    // in another place) cannot be copied by the kernel that overwrites the state buffers:
    // it goes through a buffer of its own first.
    const Graph::Output& o = body_->outputs[j];
    bool from_state = body_->values[size_t(o.value)].kind == ValueKind::input;
    bool identity = o.value == body_->inputs[j] && o.offset == 0;
    spare_.push_back(from_state && !identity ? al.allocate(state_[j].bytes, "loop") : StorageRef());
  }
  chained_ = chainable();
}

bool DeviceLoop::chainable() const {
  if (unroll_ < 2 || random_.num_ops || body_->has_pieces()) return false;
  for (const Node& n : body_->nodes)
    if (n.fused) return false;
  std::vector<int> seen;
  for (size_t j = 0; j < state_.size(); ++j) {
    const Graph::Output& o = body_->outputs[j];
    const Value& v = body_->values[size_t(o.value)];
    // A returned value has a buffer of its own (prepare_device_graph), never arena bytes.
    if (spare_[j] || o.offset != 0 || state_[j].bytes == 0 || v.bytes != state_[j].bytes ||
        v.kind != ValueKind::output || std::find(seen.begin(), seen.end(), o.value) != seen.end())
      return false;
    seen.push_back(o.value);
  }
  return true;
}

int loop_unroll_for(size_t body_nodes, bool nested_loop, int requested) {
  if (requested > 0) return requested;
  if (nested_loop) return 1;
  return int(std::clamp<size_t>(size_t(kLoopNodesPerLaunch) / (body_nodes + 1), 1,
                                size_t(kMaxLoopUnroll)));
}

void* DeviceLoop::state_buffer(size_t j) const {
  return body_->values[size_t(body_->inputs[j])].storage->data();
}

const void* DeviceLoop::initial_source(size_t j) const {
  return static_cast<const unsigned char*>(state_[j].in->data()) + state_[j].in_offset;
}

const void* DeviceLoop::next_source(size_t j) const {
  const Graph::Output& o = body_->outputs[j];
  return static_cast<const unsigned char*>(body_->values[size_t(o.value)].storage->data()) +
         size_t(o.offset) * size_of(o.dtype);
}

const void* DeviceLoop::count_address() const {
  return static_cast<const unsigned char*>(count_->data()) +
         size_t(count_offset_) * size_of(count_dtype_);
}

void DeviceLoop::prepare_chains(int* compiled, std::string* fallback) {
  prepare_device_fusion(*body_);
  if (iterated_kernel_) {
    void* in_place = state_buffer(0);
    iterated_ =
        upload_chain(*iterated_kernel_, body_->device,
                     {{body_->values[size_t(body_->inputs[0])].storage.get(), in_place},
                      {body_->values[size_t(body_->outputs[0].value)].storage.get(), in_place}});
    iterated_kernel_.reset();
  }
  *compiled += body_->compiled_chains;
  if (!body_->chain_fallback.empty()) *fallback = body_->chain_fallback;
  if (!iterated_) return;
  if (iterated_->args.compiled) ++*compiled;
  else *fallback = iterated_->interpreted_because;
}

KernelContext DeviceLoop::body_context(const KernelContext& ctx) const {
  DeviceGraph& dg = *body_->device_graph;
  dg.api = ctx.api;
  KernelContext cctx = capture_context(ctx, dg);
  // Host functions live as long as the graph being built (cleared when it is rebuilt):
  // the body's nodes are added to it once per iteration and per WHILE node, and again for
  // each iteration of an enclosing unrolled loop.
  if (ctx.host_functions) cctx.host_functions = ctx.host_functions;
  return cctx;
}

kernels::FusedChain DeviceLoop::iterated_args() const {
  kernels::FusedChain args = iterated_->args;
  if (count_) {
    args.count = count_address();
    args.count_dtype = count_dtype_;
  } else {
    args.iterations = fixed_;
  }
  return args;
}

std::string DeviceLoop::add_to(GraphHandle h, std::span<const GraphNodeHandle> deps,
                               const KernelContext& ctx, std::vector<GraphNodeHandle>* exits) {
  // The body's iterations run on the device with no host step between them: a kernel that
  // needs one (a collective's agreement) refuses the capture.
  tide::detail::ReplayHooksRun no_host_steps(false);
  cuda::DeviceApi& api = *ctx.api;
  const size_t k = state_.size();
  exits->clear();
  if (iterated_) {
    // An empty state has no copy nodes (add_copy_node).
    GraphNodeHandle copy =
        add_copy_node(api, h, deps, state_buffer(0), initial_source(0), state_[0].bytes);
    const kernels::FusedChain args = iterated_args();
    KernelContext cctx = body_context(ctx);
    std::string why;
    GraphNodeHandle run = api.graph_add_captured(
        h, copy ? std::span<const GraphNodeHandle>(&copy, 1) : deps,
        [&](cuda::StreamHandle s) {
          cctx.stream = s;
          launch_chain(cctx, args);
        },
        &why);
    if (!run) return "CUDA refused to capture the loop's fused body: " + why;
    GraphNodeHandle out =
        add_copy_node(api, h, {&run, 1}, state_[0].out->data(), state_buffer(0), state_[0].bytes);
    exits->push_back(out ? out : run);
    return {};
  }
  if (k > cuda::kMaxLoopCopies)
    return tide::detail::concat("a loop of ", k,
                                " state tensors (a CUDA graph's loop kernels "
                                "copy at most ",
                                cuda::kMaxLoopCopies, ")");
  std::string why;
  cuda::LoopConditions conds;
  conds.unroll = unroll_;
  if (!api.graph_create_condition(h, &conds.main, &why) ||
      (unroll_ > 1 && !api.graph_create_condition(h, &conds.rest, &why)))
    return "CUDA refused a WHILE node: " + why;

  std::vector<LoopCopy> initial;
  for (size_t j = 0; j < k; ++j)
    initial.push_back({state_buffer(j), initial_source(j), state_[j].bytes});
  cuda::LoopCount count;
  count.fixed = fixed_;
  if (count_) {
    count.tensor = count_address();
    count.dtype = count_dtype_;
  }
  auto* counter = static_cast<int64_t*>(counter_->data());
  GraphNodeHandle start = api.graph_add_loop_start(h, deps, conds, counter, count, initial,
                                                   random_.num_ops ? &random_ : nullptr);
  // The main WHILE node (unroll_ iterations per launch), then the rest, one per launch.
  GraphNodeHandle last = start;
  for (int rest = 0; rest <= (unroll_ > 1 ? 1 : 0); ++rest) {
    GraphHandle body = nullptr;
    const cuda::ConditionalHandle cond = rest ? conds.rest : conds.main;
    GraphNodeHandle loop = api.graph_add_while(h, {&last, 1}, cond, &body, &why);
    if (!loop) return "CUDA refused a WHILE node: " + why;
    const int64_t per_launch = rest ? 1 : unroll_;
    std::string failed = !rest && chained_
                             ? add_chained_iterations(body, per_launch, cond, per_launch, ctx)
                             : add_iterations(body, per_launch, cond, per_launch, ctx);
    if (!failed.empty()) return failed;
    last = loop;
  }
  for (size_t j = 0; j < k; ++j)
    if (GraphNodeHandle n = add_copy_node(api, h, {&last, 1}, state_[j].out->data(),
                                          state_buffer(j), state_[j].bytes))
      exits->push_back(n);
  if (exits->empty()) exits->push_back(last);  // every state empty
  return {};
}

std::string DeviceLoop::add_iterations(GraphHandle body, int64_t iterations,
                                       cuda::ConditionalHandle cond, int64_t threshold,
                                       const KernelContext& ctx) {
  cuda::DeviceApi& api = *ctx.api;
  const KernelContext cctx = body_context(ctx);
  std::vector<GraphNodeHandle> after;  // the previous iteration's step kernel
  for (int64_t it = 0; it < iterations; ++it) {
    // The body's planned nodes, then the next state into the state buffers.
    std::vector<GraphNodeHandle> sinks;
    std::string failed = add_planned_nodes(*body_, body, after, cctx, &sinks);
    if (!failed.empty()) return "in its body: " + failed;
    std::vector<GraphNodeHandle> before_step = sinks;
    std::vector<LoopCopy> next;
    for (size_t j = 0; j < state_.size(); ++j) {
      const void* src = next_source(j);
      if (spare_[j]) {
        if (GraphNodeHandle n =
                add_copy_node(api, body, sinks, spare_[j]->data(), src, state_[j].bytes))
          before_step.push_back(n);
        src = spare_[j]->data();
      }
      next.push_back({state_buffer(j), src, state_[j].bytes});
    }
    GraphNodeHandle step = api.graph_add_loop_step(body, before_step, cond, threshold,
                                                   static_cast<int64_t*>(counter_->data()), 1, next,
                                                   random_.num_ops ? &random_ : nullptr);
    after.assign(1, step);
  }
  return {};
}

std::string DeviceLoop::add_chained_iterations(GraphHandle body, int64_t iterations,
                                               cuda::ConditionalHandle cond, int64_t threshold,
                                               const KernelContext& ctx) {
  const KernelContext cctx = body_context(ctx);
  const size_t k = state_.size();
  // The capture reads the bindings of the body's slots: odd iterations read the next
  // state's buffer and write the state buffer, and the bindings are put back whatever
  // happens.
  std::vector<Storage*> in(k), out(k);
  std::vector<void*> state_at(k), next_at(k);
  for (size_t j = 0; j < k; ++j) {
    in[j] = body_->values[size_t(body_->inputs[j])].storage.get();
    out[j] = body_->values[size_t(body_->outputs[j].value)].storage.get();
    state_at[j] = in[j]->data();
    next_at[j] = out[j]->data();
  }
  struct Restore {
    std::vector<Storage*>&in, &out;
    std::vector<void*>&state_at, &next_at;
    ~Restore() {
      for (size_t j = 0; j < in.size(); ++j) {
        in[j]->rebind(state_at[j]);
        out[j]->rebind(next_at[j]);
      }
    }
  } restore{in, out, state_at, next_at};
  std::vector<GraphNodeHandle> after;
  for (int64_t it = 0; it < iterations; ++it) {
    const bool odd = it % 2 == 1;
    for (size_t j = 0; j < k; ++j) {
      in[j]->rebind(odd ? next_at[j] : state_at[j]);
      out[j]->rebind(odd ? state_at[j] : next_at[j]);
    }
    std::vector<GraphNodeHandle> sinks;
    std::string failed = add_planned_nodes(*body_, body, after, cctx, &sinks);
    if (!failed.empty()) return "in its body: " + failed;
    after = std::move(sinks);
  }
  // An odd count of iterations leaves the state in the next state's buffers.
  std::vector<LoopCopy> back;
  if (iterations % 2 == 1)
    for (size_t j = 0; j < k; ++j) back.push_back({state_at[j], next_at[j], state_[j].bytes});
  ctx.api->graph_add_loop_step(body, after, cond, threshold,
                               static_cast<int64_t*>(counter_->data()), iterations, back, nullptr);
  return {};
}

void DeviceLoop::launch(const KernelContext& ctx) const {
  cuda::DeviceApi& api = *ctx.api;
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    if (dst != src) api.memcpy_async(dst, src, bytes, CopyKind::device_to_device, ctx.stream);
  };
  if (iterated_) {  // the count is read on the device
    copy(state_buffer(0), initial_source(0), state_[0].bytes);
    launch_chain(ctx, iterated_args());
    copy(state_[0].out->data(), state_buffer(0), state_[0].bytes);
    return;
  }
  // What the host must read first (the writers ran earlier on this stream, or another
  // stream's were waited for before this task): the count, the random base.
  int64_t n = fixed_;
  uint64_t base[2] = {0, 0};
  alignas(8) unsigned char count_host[8] = {};
  if (count_ || random_.num_ops) {
    cuda::Status st = api.synchronize(ctx.stream);
    if (st.failed())
      throw std::runtime_error("reading the loop's count and random counters: " + st.message);
    cuda::DeviceRuntime& rt = cuda::DeviceRuntime::get(body_->device.index);
    if (count_) {
      rt.copy_to_host(count_host, count_address(), size_of(count_dtype_), "loop");
      n = read_loop_count(count_host, count_dtype_);
    }
    if (random_.num_ops) rt.copy_to_host(base, random_.base, sizeof(base), "loop");
  }
  const uint64_t offset0 = random_.substream ? 0 : base[0];
  const uint64_t key = random_.substream ? philox::substream_key(base[1], base[0]) : base[1];
  if (n < 0)
    throw std::runtime_error(loop_count_error(count_ ? count_host : nullptr, count_dtype_, n));
  const size_t k = state_.size();
  for (size_t j = 0; j < k; ++j) copy(state_buffer(j), initial_source(j), state_[j].bytes);
  for (int64_t it = 0; it < n; ++it) {
    for (size_t r = 0; r < random_.num_ops; ++r) {
      const uint64_t counters[2] = {offset0 + uint64_t(it) * random_.blocks + random_.prefix[r],
                                    key};
      api.write_words(ctx.stream, random_.slots[r], counters);
    }
    launch_planned_nodes(*body_, ctx);
    for (size_t j = 0; j < k; ++j)
      if (spare_[j]) copy(spare_[j]->data(), next_source(j), state_[j].bytes);
    for (size_t j = 0; j < k; ++j)
      copy(state_buffer(j), spare_[j] ? spare_[j]->data() : next_source(j), state_[j].bytes);
  }
  for (size_t j = 0; j < k; ++j) copy(state_[j].out->data(), state_buffer(j), state_[j].bytes);
}

std::vector<Tensor> add_device_loop(Recorder& outer, LoopNode n) {
  const LoopCount& count = n.count;
  std::shared_ptr<Graph> body = std::move(n.body);
  // The body's counters advance on the device (cuda::LoopRandom): the loop kernels set and
  // move them from the range or block the enclosing replay reserves and writes.
  const BodyRandom br = plan_body_random(*body, count);
  cuda::LoopRandom random;
  if (br.gen) {
    TIDE_CHECK(body->random.size() <= cuda::kMaxLoopRandom, "loop", "the body has ",
               body->random.size(), " random ops; a traced loop on a GPU takes at most ",
               cuda::kMaxLoopRandom, " (run the loop eagerly, or draw some outside it)");
    random.base = outer.random_counter(*br.gen, br.reserved_numel(count), body->device);
    random.substream = br.substream;
    random.blocks = br.blocks;
    random.num_ops = body->random.size();
    for (size_t r = 0; r < random.num_ops; ++r) {
      random.slots[r] = static_cast<uint64_t*>(body->random[r].device_slot->data());
      random.prefix[r] = br.prefix[r];
    }
  }
  // Its chains are uploaded once the enclosing graph is prepared (prepare_chains): they may
  // read its values, which have no memory yet. A body that is one fused chain on its one
  // state runs all iterations in one kernel, the state updated in place in the body's
  // state buffer (see LoopNode::iterated, trace/loop_node.h).
  prepare_device_graph(*body);
  std::vector<Tensor> result;
  std::vector<LoopState> ls;
  std::vector<Storage*> reads, writes;
  for (const Tensor& t : n.state) {
    Tensor r = Tensor::empty(t.shape(), t.dtype(), t.device(), "loop");
    ls.push_back({t.storage(), size_t(t.offset()) * size_of(t.dtype()), r.storage(), t.nbytes()});
    reads.push_back(t.storage());
    writes.push_back(r.storage());
    result.push_back(r);
  }
  Storage* count_storage = nullptr;
  if (count.tensor.defined()) {
    count_storage = count.tensor.storage();
    reads.push_back(count_storage);
  }
  add_body_externals(*body, reads, writes);
  auto loop =
      std::make_shared<DeviceLoop>(std::move(body), std::move(ls), count_storage,
                                   count.tensor.defined() ? count.tensor.dtype() : DType::int64,
                                   count.tensor.defined() ? count.tensor.offset() : 0, count.fixed,
                                   n.iterated, random, outer.loop_unroll());
  outer.record(
      "loop", reads, writes, [loop](const KernelContext& ctx) { loop->launch(ctx); }, n.site);
  outer.set_last_piece(std::move(loop));
  return result;
}

}  // namespace tide::trace
