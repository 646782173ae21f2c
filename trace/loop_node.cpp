#include "trace/loop_node.h"

#include "core/error.h"
#include "core/random_scope.h"
#include "ops/fused_chain.h"

namespace tide::trace {

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

BodyRandom plan_body_random(const Graph& body, const LoopCount& count) {
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

void add_body_externals(const Graph& b, std::vector<Storage*>& reads,
                        std::vector<Storage*>& writes) {
  for (int id : b.external_reads)
    if (b.values[size_t(id)].kind != ValueKind::input)
      reads.push_back(b.values[size_t(id)].storage.get());
  for (int id : b.external_writes)
    if (b.values[size_t(id)].kind != ValueKind::input)
      writes.push_back(b.values[size_t(id)].storage.get());
}

}  // namespace tide::trace
