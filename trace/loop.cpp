#include "trace/loop.h"

// Random numbers in a loop body (trace/loop.h). Random ops in the body follow one rule in
// eager and traced mode, so a traced run draws the eager run's numbers bit for bit (same
// seed, same calls), and every call draws new ones:
//   - An int count: the body draws from its generator as the plain eager loop does
//     (iteration i gets the counters eager's iteration i reserves); the traced node
//     reserves the range of all n iterations when the replay is queued.
//   - A tensor count: the body draws from a sub-stream of its generator. When the loop
//     runs (in eager order among the random ops around it), it reserves ONE Philox block
//     (counter c = gen.reserve(4), key k = gen.seed()) and keys the sub-stream with
//     substream_key(k, c) = splitmix64(splitmix64(k) ^ c) (core/rng.h); iteration i,
//     random op j of the body draws at block i * S + prefix_j under that key (S: blocks
//     the body draws per iteration, prefix_j: blocks of its random ops before j). The
//     generator advances by exactly one block whatever n is, 0 included; the numbers
//     are independent of what the same body draws under an int count. Traced, the block
//     is reserved when the replay is queued and the key derived when the node runs.
//     Eager (core/random_scope.h), the block is reserved at the body's first random op
//     of iteration 0 (nothing can draw from that generator in between, so the order is
//     the same); with n == 0 the eager loop records the body once, without running it,
//     to learn its generator and reserves the block all the same — the body's C++ side
//     effects happen once then, and a body that cannot be recorded (it reads a value on
//     the host, so it cannot be traced either) reserves nothing. Random ops of zero
//     elements draw nothing and do not count. Nested loops compose: an inner loop draws
//     its range or block from the enclosing loop's sub-stream.
//   The body's random ops must share one generator ("[loop]" otherwise, traced at record
//   time, eager at the first draw of the second generator, or at n == 0 after recording).
//   A trace::function replayed inside an eager tensor-count body draws from the
//   sub-stream too (its ops are inlined when the enclosing loop is traced).

#include <cstring>
#include <memory>

#include "core/allocator.h"
#include "core/error.h"
#include "core/loop_count.h"
#include "core/random_scope.h"
#include "core/rng.h"
#include "ops/autograd.h"
#include "ops/creation.h"
#include "ops/op_util.h"
#include "trace/device_fusion.h"
#include "trace/device_graph.h"
#include "trace/device_loop.h"
#include "trace/executor.h"
#include "trace/fusion.h"
#include "trace/planner.h"
#include "trace/recorder.h"

namespace tide::trace {

namespace {

// memmove that takes empty buffers: an empty state has no memory (a null pointer, which
// memcpy and memmove must not get even for zero bytes).
void move_bytes(void* dst, const void* src, size_t n) {
  if (n) std::memmove(dst, src, n);
}

struct Count {
  int64_t fixed = 0;
  Tensor tensor;  // defined: read when the loop runs
};

void check_state(const std::vector<Tensor>& state, const char* op) {
  TIDE_CHECK(!state.empty(), op, "needs at least one state tensor");
  for (const Tensor& t : state) tide::detail::check_defined(t, op);
}

void check_step(const std::vector<Tensor>& state, const std::vector<Tensor>& next) {
  TIDE_CHECK(next.size() == state.size(), "loop", "the body returned ", next.size(),
             " tensors for ", state.size(), " state tensors");
  for (size_t j = 0; j < state.size(); ++j) {
    TIDE_CHECK(next[j].defined(), "loop", "the body returned an undefined tensor at ", j);
    TIDE_CHECK(next[j].shape() == state[j].shape() && next[j].dtype() == state[j].dtype(), "loop",
               "state ", j, " is ", tide::detail::describe(state[j]), " but the body returned ",
               tide::detail::describe(next[j]));
  }
}

// The loop node's kernel: runs the body graph n times, ping-ponging the state between the
// node's output buffers and buffers of its own.
struct LoopProgram {
  std::shared_ptr<Graph> body;
  std::vector<Storage*> body_inputs;  // slots of the body's state placeholders
  std::vector<Graph::Output> body_outputs;
  std::vector<size_t> bytes;      // per state
  std::vector<StorageRef> spare;  // per state: the other half of the ping-pong
  int64_t fixed = 0;
  Storage* count = nullptr;  // when the count is a tensor
  DType count_dtype = DType::int64;
  int64_t count_offset = 0;
  // A one-state body that is a single fused elementwise kernel reading the state and
  // writing the next state: run in place, all iterations per block in registers.
  std::shared_ptr<BoundChain> iterated;
  // Random ops in the body: {offset, key} the enclosing replay refreshes, Philox blocks per
  // iteration, and each op's first block in an iteration. An int count: the range of all
  // n iterations, drawn at its offset under its key. A tensor count (`substream`): the one
  // block the loop reserved; the body draws from offset 0 under substream_key(key, offset).
  const uint64_t* random_base = nullptr;
  uint64_t random_blocks = 0;
  std::vector<uint64_t> random_prefix;
  bool substream = false;

  void run(const std::vector<Storage*>& in, const std::vector<size_t>& in_offsets,
           const std::vector<Storage*>& out) const {
    int64_t n = fixed;
    const void* at = count ? static_cast<const unsigned char*>(count->data()) +
                                 size_t(count_offset) * size_of(count_dtype)
                           : nullptr;
    if (at) n = read_loop_count(at, count_dtype);
    if (n < 0) throw std::runtime_error(loop_count_error(at, count_dtype, n));
    size_t k = in.size();
    if (iterated) {
      void* buf = out[0]->data();
      move_bytes(buf, static_cast<unsigned char*>(in[0]->data()) + in_offsets[0], bytes[0]);
      std::lock_guard<std::mutex> lock(body->run_mu);
      body_inputs[0]->rebind(buf);
      body->values[size_t(body_outputs[0].value)].storage->rebind(buf);
      iterated->run(n);
      return;
    }
    std::vector<unsigned char*> cur(k), alt(k);
    for (size_t j = 0; j < k; ++j) {
      cur[j] = static_cast<unsigned char*>(out[j]->data());
      alt[j] = static_cast<unsigned char*>(spare[j]->data());
      move_bytes(cur[j], static_cast<unsigned char*>(in[j]->data()) + in_offsets[j], bytes[j]);
    }
    uint64_t random_offset = 0, random_key = 0;
    if (random_base) {
      random_offset = substream ? 0 : random_base[0];
      random_key = substream ? substream_key(random_base[1], random_base[0]) : random_base[1];
    }
    std::lock_guard<std::mutex> lock(body->run_mu);
    for (int64_t it = 0; it < n; ++it) {
      for (size_t j = 0; j < k; ++j) body_inputs[j]->rebind(cur[j]);
      // Computed outputs write straight into the other buffer.
      for (size_t j = 0; j < k; ++j) {
        const Value& v = body->values[size_t(body_outputs[j].value)];
        if (v.kind == ValueKind::output && body_outputs[j].offset == 0) v.storage->rebind(alt[j]);
      }
      for (size_t r = 0; r < random_prefix.size(); ++r) {
        body->random[r].slot[0] = random_offset + uint64_t(it) * random_blocks + random_prefix[r];
        body->random[r].slot[1] = random_key;
      }
      run_program(*body);
      for (size_t j = 0; j < k; ++j) {  // identities, duplicates, views, constants
        const Value& v = body->values[size_t(body_outputs[j].value)];
        auto* src = static_cast<unsigned char*>(v.storage->data()) +
                    size_t(body_outputs[j].offset) * size_of(body_outputs[j].dtype);
        if (src != alt[j]) move_bytes(alt[j], src, bytes[j]);
      }
      std::swap(cur, alt);
    }
    for (size_t j = 0; j < k; ++j)
      if (cur[j] != out[j]->data()) move_bytes(out[j]->data(), cur[j], bytes[j]);
  }
};

// The kernel a one-state loop may iterate in place (see LoopProgram::iterated), or null.
std::shared_ptr<BoundChain> iterable(const Graph& body, const std::vector<Storage*>& inputs,
                                     const std::vector<Tensor>& state) {
  if (state.size() != 1 || body.nodes.size() != 1 || !body.nodes[0].fused) return nullptr;
  const Graph::Output& o = body.outputs[0];
  const Value& out = body.values[size_t(o.value)];
  if (out.kind != ValueKind::output || o.offset != 0) return nullptr;
  const BoundChain& fc = *body.nodes[0].fused;
  if (size_t(fc.n) * size_of(fc.dtype) != state[0].nbytes()) return nullptr;
  Storage *in_slot = inputs[0], *out_slot = out.storage.get();
  bool written = false;
  for (const BoundChain::MemRef& m : fc.mem) {  // in step order: a, b, out
    const kernels::ChainStep& s = fc.steps[m.step];
    if (m.operand < 2) {
      const kernels::ChainOperand& a = m.operand == 0 ? s.a : s.b;
      if (m.storage == in_slot && (written || a.stride != 1 || m.offset != 0))
        return nullptr;  // would read the state after the step that overwrites it
      continue;
    }
    if (m.storage != out_slot || m.offset != 0 || written) return nullptr;
    written = true;
  }
  return written ? body.nodes[0].fused : nullptr;
}

// The generator a tensor-count loop body's sub-stream comes from: that of its random ops of
// more than zero elements (nullptr: none). Throws "[loop]" for two.
Generator* substream_generator(const Graph& body) {
  Generator* gen = nullptr;
  for (const RandomCounter& c : body.random) {
    if (c.numel == 0) continue;
    if (!gen) gen = c.gen;
    TIDE_CHECK(c.gen == gen, "loop", tide::detail::kSubstreamTwoGenerators,
               " (this body draws from two)");
  }
  return gen;
}

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
  uint64_t reserved_numel(const Count& count) const {
    return substream ? 4 : uint64_t(count.fixed) * blocks * 4;
  }
};

BodyRandom plan_body_random(const Graph& body, const Count& count) {
  BodyRandom r;
  const std::vector<RandomCounter>& rnd = body.random;
  if (count.tensor.defined()) {
    r.gen = substream_generator(body);
  } else if (!rnd.empty()) {
    for (const RandomCounter& c : rnd)
      TIDE_CHECK(c.gen == rnd[0].gen, "loop",
                 "random ops inside one traced loop body must share a generator");
    r.gen = rnd[0].gen;
  }
  if (!r.gen) return r;
  for (const RandomCounter& c : rnd) {
    r.prefix.push_back(r.blocks);
    r.blocks += (c.numel + 3) / 4;
  }
  r.substream = count.tensor.defined();
  return r;
}

// What the body reads and writes outside itself (captures, state), for the loop node.
void add_body_externals(const Graph& b, std::vector<Storage*>& reads,
                        std::vector<Storage*>& writes) {
  for (int id : b.external_reads)
    if (b.values[size_t(id)].kind != ValueKind::input)
      reads.push_back(b.values[size_t(id)].storage.get());
  for (int id : b.external_writes)
    if (b.values[size_t(id)].kind != ValueKind::input)
      writes.push_back(b.values[size_t(id)].storage.get());
}

// On a GPU: the loop node becomes a WHILE node of the enclosing CUDA graph
// (trace/device_loop.h); launched node by node, it runs the body's kernels n times.
std::vector<Tensor> traced_device_loop(Recorder& outer, const Count& count,
                                       std::shared_ptr<Graph> body,
                                       const std::vector<Tensor>& state,
                                       const std::shared_ptr<BoundChain>& iterated,
                                       tide::SourceLocation site) {
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
  // state buffer (see LoopProgram::iterated).
  prepare_device_graph(*body);
  std::vector<Tensor> result;
  std::vector<LoopState> ls;
  std::vector<Storage*> reads, writes;
  for (const Tensor& t : state) {
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
                                   iterated, random, outer.loop_unroll());
  outer.record(
      "loop", reads, writes, [loop](const KernelContext& ctx) { loop->launch(ctx); }, site);
  outer.set_last_piece(std::move(loop));
  return result;
}

// Which of a traced loop's results the eager loop would return requiring grad: a state
// the body computes from a tensor it captures that requires grad (next[k] requires grad
// after recording), or from a state that requires grad, initially or after an earlier
// iteration. The body's placeholders carry no autograd history, so the states' flow through
// the body comes from its recorded graph (which states each next state reads, directly or
// through in-place writes), taken to a fixpoint over the iterations. An int count of 0
// returns the initial states (copies); a tensor count may be 0 too, so its initial states
// count as well. Conservative: a state that needs grad after some iteration counts for all.
std::vector<bool> results_needing_grad(const std::vector<Tensor>& state,
                                       const std::vector<bool>& next_requires_grad,
                                       const Count& count, const Graph& body) {
  const size_t k = state.size();
  std::vector<bool> initial(k), result(k);
  for (size_t j = 0; j < k; ++j) initial[j] = state[j].requires_grad();
  if (!count.tensor.defined() && count.fixed == 0) return initial;
  // reads[v][j]: value v of the body depends on state j.
  std::vector<std::vector<bool>> reads(body.values.size(), std::vector<bool>(k));
  for (size_t j = 0; j < k; ++j) reads[size_t(body.inputs[j])][j] = true;
  for (const Node& n : body.nodes) {
    std::vector<bool> m(k);
    for (int r : n.reads)
      for (size_t j = 0; j < k; ++j) m[j] = m[j] || reads[size_t(r)][j];
    for (int w : n.writes)
      for (size_t j = 0; j < k; ++j) reads[size_t(w)][j] = reads[size_t(w)][j] || m[j];
  }
  std::vector<bool> cur = initial;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < k; ++i) {
      bool needs = next_requires_grad[i];
      for (size_t j = 0; j < k && !needs; ++j)
        needs = cur[j] && reads[size_t(body.outputs[i].value)][j];
      if (needs && !cur[i]) cur[i] = changed = true;
      result[i] = result[i] || needs;
    }
  }
  if (count.tensor.defined())
    for (size_t i = 0; i < k; ++i) result[i] = result[i] || initial[i];
  return result;
}

std::vector<Tensor> traced_loop(Recorder& outer, const Count& count, const LoopBody& body,
                                const std::vector<Tensor>& state, tide::SourceLocation site) {
  Recorder rec("trace::loop body");
  rec.set_fusion(outer.fusion());
  rec.set_loop_unroll(outer.loop_unroll());
  std::vector<Tensor> ph, next;
  for (const Tensor& t : state) ph.push_back(rec.placeholder(t));
  {
    Recording on(rec);
    next = body(ph);
  }
  check_step(state, next);
  std::vector<bool> next_requires_grad;
  for (const Tensor& t : next) next_requires_grad.push_back(t.requires_grad());
  auto prog = std::make_shared<LoopProgram>();
  for (const Tensor& p : ph) prog->body_inputs.push_back(p.storage());
  ph.clear();
  prog->body = rec.finish(std::move(next));
  const std::vector<bool> would_need_grad =
      results_needing_grad(state, next_requires_grad, count, *prog->body);
  // Eagerly, these results carry the gradient of every iteration; the loop node carries
  // none (its body ran once, here). They say so when a backward() reaches them.
  const auto refuse_gradients = [&](std::vector<Tensor> result) {
    const std::string where = tide::detail::concat(site.file_name(), ":", site.line());
    for (size_t k = 0; k < result.size(); ++k)
      if (would_need_grad[k])
        autograd::record_refusal(
            "loop", result[k],
            tide::detail::concat(
                "no gradient flows through the trace::loop at ", where, ", whose state ", k,
                " depends on tensors that require grad: in a traced function its body is "
                "recorded once, not per iteration; call backward() inside the loop body, unroll "
                "the loop with a C++ for loop in the traced function, or run the loop outside it"));
    return result;
  };
  outer.note_nested_references(*prog->body, rec);
  fuse(*prog->body, outer.fusion(), /*single_nodes=*/true);
  plan(*prog->body);
  prepare_replay(*prog->body);
  if (!prog->body->device.is_cpu())
    return refuse_gradients(traced_device_loop(
        outer, count, prog->body, state, iterable(*prog->body, prog->body_inputs, state), site));
  prog->body_outputs = prog->body->outputs;
  prog->fixed = count.fixed;
  prog->iterated = iterable(*prog->body, prog->body_inputs, state);
  const BodyRandom br = plan_body_random(*prog->body, count);
  if (br.gen) {
    prog->random_prefix = br.prefix;
    prog->random_blocks = br.blocks;
    prog->substream = br.substream;
    prog->random_base = outer.random_counter(*br.gen, br.reserved_numel(count), Device::cpu());
  }

  // The node: reads the initial state, the count and what the body reads from outside;
  // writes fresh state tensors (values of the enclosing graph) and what the body writes.
  std::vector<Tensor> result;
  std::vector<Storage*> in, out, reads, writes;
  std::vector<size_t> in_offsets;
  for (const Tensor& t : state) {
    Tensor r = Tensor::empty(t.shape(), t.dtype(), t.device(), "loop");
    {
      tide::detail::CapturePause pause;
      prog->spare.push_back(Allocator::get(t.device()).allocate(t.nbytes(), "loop"));
    }
    prog->bytes.push_back(t.nbytes());
    in.push_back(t.storage());
    in_offsets.push_back(size_t(t.offset()) * size_of(t.dtype()));
    out.push_back(r.storage());
    result.push_back(r);
  }
  reads = in;
  if (count.tensor.defined()) {
    prog->count = count.tensor.storage();
    prog->count_dtype = count.tensor.dtype();
    prog->count_offset = count.tensor.offset();
    reads.push_back(prog->count);
  }
  add_body_externals(*prog->body, reads, writes);
  writes.insert(writes.end(), out.begin(), out.end());
  outer.record(
      "loop", reads, writes,
      [prog, in, in_offsets, out](const KernelContext&) { prog->run(in, in_offsets, out); }, site);
  return refuse_gradients(std::move(result));
}

// The body gets the state by value, as the traced loop node gives it (a copy in the loop's
// own buffers): a body that writes its state in place never writes the caller's tensors.
std::vector<Tensor> eager_loop(int64_t n, const LoopBody& body, std::vector<Tensor> state) {
  for (Tensor& t : state) t = clone(t);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<Tensor> next = body(state);
    check_step(state, next);
    state = std::move(next);
  }
  return state;
}

// Eager, tensor count: the body draws from a RandomScope, which reserves its one block at
// the body's first random op. With n == 0 the body does not run, so it is recorded once
// (never run) to learn its generator, and the block is reserved all the same, as the
// traced loop node does; a body that cannot be recorded (it reads a value on the host, so
// it cannot be traced either) reserves nothing.
std::vector<Tensor> eager_substream_loop(int64_t n, const LoopBody& body,
                                         std::vector<Tensor> state) {
  if (n > 0) {
    tide::detail::RandomScope scope;
    return eager_loop(n, body, std::move(state));
  }
  std::shared_ptr<Graph> g;
  try {
    Recorder rec("trace::loop body");
    std::vector<Tensor> ph, next;
    for (const Tensor& t : state) ph.push_back(rec.placeholder(t));
    {
      NoGrad no_grad;
      Recording on(rec);
      next = body(ph);
    }
    ph.clear();
    g = rec.finish(std::move(next));
  } catch (const std::exception&) {
    g = nullptr;
  }
  if (g)
    if (Generator* gen = substream_generator(*g)) reserve_random(*gen, 4);
  return eager_loop(0, body, std::move(state));
}

std::vector<Tensor> run_loop(const Count& count, const LoopBody& body, std::vector<Tensor> state,
                             tide::SourceLocation site) {
  check_state(state, "loop");
  if (tide::detail::CaptureSink* c = tide::detail::capturing()) {
    auto* outer = dynamic_cast<Recorder*>(c);
    TIDE_CHECK(outer, "loop", "recording with an unknown capture sink");
    return traced_loop(*outer, count, body, state, site);
  }
  int64_t n = count.tensor.defined() ? count.tensor.item<int64_t>() : count.fixed;
  TIDE_CHECK(n >= 0, "loop", "count must be >= 0, got ", n);
  if (count.tensor.defined()) return eager_substream_loop(n, body, std::move(state));
  return eager_loop(n, body, std::move(state));
}

Count count_of(const Tensor& n) {
  tide::detail::check_defined(n, "loop");
  TIDE_CHECK(n.numel() == 1, "loop", "the count must be a one-element tensor, got ",
             tide::detail::describe(n));
  return Count{0, n};
}

Count count_of(int64_t n) {
  TIDE_CHECK(n >= 0, "loop", "count must be >= 0, got ", n);
  return Count{n, Tensor()};
}

LoopBody single(const std::function<Tensor(const Tensor&)>& f) {
  return [f](const std::vector<Tensor>& s) { return std::vector<Tensor>{f(s[0])}; };
}

}  // namespace

std::vector<Tensor> loop(int64_t n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site) {
  return run_loop(count_of(n), body, std::move(state), site);
}
std::vector<Tensor> loop(const Tensor& n, const LoopBody& body, std::vector<Tensor> state,
                         tide::SourceLocation site) {
  return run_loop(count_of(n), body, std::move(state), site);
}
Tensor loop(int64_t n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site) {
  return run_loop(count_of(n), single(body), {state}, site)[0];
}
Tensor loop(const Tensor& n, const std::function<Tensor(const Tensor&)>& body, const Tensor& state,
            tide::SourceLocation site) {
  return run_loop(count_of(n), single(body), {state}, site)[0];
}

}  // namespace tide::trace
