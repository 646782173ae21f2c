// The CPU's trace::loop node (trace/cpu/loop_program.h).
#include "trace/cpu/loop_program.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "core/allocator.h"
#include "core/engine/capture.h"
#include "core/loop_count.h"
#include "core/rng.h"
#include "trace/cpu/executor.h"
#include "trace/recorder.h"

namespace tide::trace {

namespace {

// memmove that takes empty buffers: an empty state has no memory (a null pointer, which
// memcpy and memmove must not get even for zero bytes).
void move_bytes(void* dst, const void* src, size_t n) {
  if (n) std::memmove(dst, src, n);
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

}  // namespace

std::vector<Tensor> add_program_loop(Recorder& outer, LoopNode n) {
  const LoopCount& count = n.count;
  auto prog = std::make_shared<LoopProgram>();
  prog->body = std::move(n.body);
  prog->body_inputs = std::move(n.body_inputs);
  prog->body_outputs = prog->body->outputs;
  prog->fixed = count.fixed;
  prog->iterated = std::move(n.iterated);
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
  for (const Tensor& t : n.state) {
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
      [prog, in, in_offsets, out](const KernelContext&) { prog->run(in, in_offsets, out); },
      n.site);
  return result;
}

}  // namespace tide::trace
