#include "trace/fusion.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "core/kernel_context.h"
#include "ops/op_traits.h"
#include "ops/op_util.h"

namespace tide::trace {

double fusion_tolerance(DType dtype) { return dtype == DType::float64 ? 1e-12 : 1e-6; }

namespace {

// A step's operand while the run is built: memory still named by its storage.
struct Operand {
  enum Kind : uint8_t { reg, mem, scalar } kind = mem;
  int reg_index = -1;
  Storage* storage = nullptr;
  int64_t offset = 0;  // mem: elements
  int64_t stride = 1;  // mem: 1 or 0 (one element repeated)
  alignas(8) unsigned char value[8] = {};
};
struct Step {
  kernels::FunctorId functor = kernels::FunctorId::count_;
  alignas(8) unsigned char functor_bytes[16] = {};
  Operand a, b, out;
};

bool same_operand(const Operand& x, const Operand& y) {
  if (x.kind != y.kind || x.stride != y.stride) return false;
  switch (x.kind) {
    case Operand::reg: return x.reg_index == y.reg_index;
    case Operand::mem: return x.storage == y.storage && x.offset == y.offset;
    case Operand::scalar: return std::memcmp(x.value, y.value, sizeof(x.value)) == 0;
  }
  return false;
}

// A step that updates one register in place from an operand it does not write.
bool in_place_on_register(const Step& s) {
  return s.a.kind == Operand::reg && s.out.kind == Operand::reg &&
         s.a.reg_index == s.out.reg_index &&
         !(s.b.kind == Operand::reg && s.b.reg_index == s.out.reg_index);
}

// Equal functor bytes mean equal functors (stateless ones store no bytes); padding could
// only make equal functors look different, which leaves a run as separate steps.
bool same_step(const Step& x, const Step& y) {
  return x.functor == y.functor &&
         std::memcmp(x.functor_bytes, y.functor_bytes, sizeof(x.functor_bytes)) == 0 &&
         same_operand(x.a, y.a) && same_operand(x.b, y.b) && same_operand(x.out, y.out);
}

// Appends s to c; consecutive identical steps that update one register in place (an
// unrolled `for` of one op: y = y + 1, ...) become one step repeated: the trace re-rolls
// the loop.
void append(BoundChain& c, const Step& s, const Step* previous) {
  if (previous && in_place_on_register(s) && same_step(s, *previous)) {
    ++c.steps.back().repeat;
    return;
  }
  kernels::ChainStep cs;
  cs.functor = s.functor;
  std::memcpy(cs.functor_bytes, s.functor_bytes, sizeof(cs.functor_bytes));
  const Operand* ops[3] = {&s.a, &s.b, &s.out};
  kernels::ChainOperand* outs[3] = {&cs.a, &cs.b, &cs.out};
  for (int k = 0; k < 3; ++k) {
    const Operand& o = *ops[k];
    kernels::ChainOperand& r = *outs[k];
    switch (o.kind) {
      case Operand::reg:
        r.kind = kernels::ChainOperand::reg;
        r.reg_index = uint8_t(o.reg_index);
        break;
      case Operand::mem:
        r.kind = kernels::ChainOperand::mem;
        r.stride = uint8_t(o.stride);
        c.mem.push_back({o.storage, o.offset, c.steps.size(), k});
        break;
      case Operand::scalar:
        r.kind = kernels::ChainOperand::scalar;
        std::memcpy(&r.scalar_bits, o.value, sizeof(r.scalar_bits));
        break;
    }
  }
  c.steps.push_back(cs);
}

}  // namespace

std::vector<kernels::ChainStep> BoundChain::at_addresses(
    const std::unordered_map<const Storage*, void*>& redirect) const {
  std::vector<kernels::ChainStep> out = steps;
  const size_t esize = size_of(dtype);
  for (const MemRef& m : mem) {
    auto it = redirect.find(m.storage);
    auto* base = static_cast<unsigned char*>(it != redirect.end() ? it->second : m.storage->data());
    kernels::ChainStep& s = out[m.step];
    kernels::ChainOperand& o = m.operand == 0 ? s.a : m.operand == 1 ? s.b : s.out;
    o.ptr = base + size_t(m.offset) * esize;
  }
  return out;
}

void BoundChain::run(int64_t iterations) {
  // Memory operands resolve once per run (slots are bound before the program runs).
  const size_t esize = size_of(dtype);
  for (const MemRef& m : mem) {
    kernels::ChainStep& s = steps[m.step];
    kernels::ChainOperand& o = m.operand == 0 ? s.a : m.operand == 1 ? s.b : s.out;
    o.ptr = static_cast<unsigned char*>(m.storage->data()) + size_t(m.offset) * esize;
  }
  kernels::FusedChain c;
  c.steps = steps.data();
  c.num_steps = int(steps.size());
  c.n = n;
  c.dtype = dtype;
  c.iterations = iterations;
  kernels::cpu::fused_chain(cpu_kernel_context(), c, {});
}

namespace {

bool fusible(const Node& n) {
  if (!n.ew || n.fused) return false;
  const OpTraits& t = op_traits(n.ew->id);
  return t.elementwise && !t.in_place && n.ew->in == n.ew->out && n.ew->n > 0;
}

class GroupBuilder {
 public:
  GroupBuilder(Graph& g, const std::unordered_map<Storage*, int>& ids,
               const std::vector<std::vector<int>>& readers)
      : g_(g), ids_(ids), readers_(readers) {}

  // Nodes [begin, end) of g.nodes that fuse, from `begin`, within the register budget.
  size_t extent(size_t begin) const {
    const Node& first = g_.nodes[begin];
    size_t end = begin + 1;
    std::vector<int> produced{first.writes[0]};
    while (end < g_.nodes.size()) {
      const Node& n = g_.nodes[end];
      if (!fusible(n) || n.ew->n != first.ew->n || n.ew->in != first.ew->in) break;
      if (!operands_ok(n, produced)) break;
      produced.push_back(n.writes[0]);
      ++end;
    }
    // Trim to the register budget.
    while (end - begin > 1 && registers_needed(begin, end) > kernels::kMaxChainRegisters) --end;
    return end;
  }

  Node build(size_t begin, size_t end) {
    auto fc = std::make_shared<BoundChain>();
    const Node& first = g_.nodes[begin];
    fc->n = first.ew->n;
    fc->dtype = first.ew->in;
    int registers = 0;
    Step previous;
    Node out;
    out.op = "fused";
    out.site = first.site;
    out.fused_ops = 0;
    std::unordered_map<int, int> reg_of;  // value -> register
    std::vector<int> free_regs;
    std::vector<int> last_use = last_uses(begin, end);
    auto add_unique = [](std::vector<int>& v, int x) {
      if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
    };
    for (size_t i = begin; i < end; ++i) {
      Node& n = g_.nodes[i];
      out.fused_ops += n.fused_ops;
      TIDE_ASSERT(n.ew->functor_id != kernels::FunctorId::count_,
                  "trace: a fusible op without a functor id");
      Step s;
      s.functor = n.ew->functor_id;
      std::memcpy(s.functor_bytes, n.ew->functor, sizeof(s.functor_bytes));
      s.a = operand(n.ew->a, reg_of, out, add_unique);
      if (n.ew->arity == 2) s.b = operand(n.ew->b, reg_of, out, add_unique);
      else {
        s.b.kind = Operand::scalar;
        s.b.stride = 0;
      }
      // Free registers whose value is not read after this step.
      for (auto it = reg_of.begin(); it != reg_of.end();) {
        if (last_use[size_t(it->first)] <= int(i)) {
          free_regs.push_back(it->second);
          it = reg_of.erase(it);
        } else {
          ++it;
        }
      }
      int v = n.writes[0];
      if (materialize(v, begin, end)) {
        s.out.kind = Operand::mem;
        s.out.storage = g_.values[size_t(v)].storage.get();
        s.out.offset = n.ew->out_offset;
        s.out.stride = 1;
        add_unique(out.writes, v);
      } else {
        int r;
        if (!free_regs.empty()) {
          r = free_regs.back();
          free_regs.pop_back();
        } else {
          r = registers++;
        }
        s.out.kind = Operand::reg;
        s.out.reg_index = r;
        s.out.stride = 1;
        reg_of[v] = r;
        g_.values[size_t(v)].kind = ValueKind::dead;
      }
      append(*fc, s, i > begin ? &previous : nullptr);
      previous = s;
    }
    out.fused = fc;
    out.kernel = [fc](const KernelContext&) { fc->run(); };
    return out;
  }

 private:
  // Operands that read a value made earlier in the run must read it element for element.
  bool operands_ok(const Node& n, const std::vector<int>& produced) const {
    for (const tide::detail::EwOperand* o : {&n.ew->a, &n.ew->b}) {
      if (o == &n.ew->b && n.ew->arity == 1) continue;
      if (!o->storage) continue;
      int v = ids_.at(o->storage);
      if (std::find(produced.begin(), produced.end(), v) == produced.end()) continue;
      if (o->stride != 1 || o->offset != 0) return false;
    }
    return true;
  }

  bool materialize(int v, size_t begin, size_t end) const {
    if (g_.values[size_t(v)].kind != ValueKind::intermediate) return true;
    for (int r : readers_[size_t(v)])
      if (r < int(begin) || r >= int(end)) return true;
    return false;
  }

  std::vector<int> last_uses(size_t begin, size_t end) const {
    std::vector<int> last(g_.values.size(), -1);
    for (size_t i = begin; i < end; ++i)
      for (int v : g_.nodes[i].reads) last[size_t(v)] = int(i);
    return last;
  }

  int registers_needed(size_t begin, size_t end) const {
    std::vector<int> last = last_uses(begin, end);
    int live = 0, peak = 0;
    std::vector<int> live_values;
    for (size_t i = begin; i < end; ++i) {
      std::erase_if(live_values, [&](int v) { return last[size_t(v)] <= int(i); });
      int v = g_.nodes[i].writes[0];
      if (!materialize(v, begin, end)) live_values.push_back(v);
      live = int(live_values.size());
      peak = std::max(peak, live);
    }
    return peak;
  }

  template <class AddUnique>
  Operand operand(const tide::detail::EwOperand& o, const std::unordered_map<int, int>& reg_of,
                  Node& out, AddUnique add_unique) {
    Operand r;
    if (!o.storage) {
      r.kind = Operand::scalar;
      r.stride = 0;
      std::memcpy(r.value, o.scalar, sizeof(r.value));
      return r;
    }
    int v = ids_.at(o.storage);
    if (auto it = reg_of.find(v); it != reg_of.end()) {
      r.kind = Operand::reg;
      r.reg_index = it->second;
      r.stride = 1;
      return r;
    }
    r.kind = Operand::mem;
    r.storage = o.storage;
    r.offset = o.offset;
    r.stride = o.stride;
    // A value written earlier in this run is in `writes` already; others are inputs.
    if (std::find(out.writes.begin(), out.writes.end(), v) == out.writes.end())
      add_unique(out.reads, v);
    return r;
  }

  Graph& g_;
  const std::unordered_map<Storage*, int>& ids_;
  const std::vector<std::vector<int>>& readers_;
};

}  // namespace

int fuse(Graph& g, Fusion level, bool single_nodes) {
  if (level == Fusion::none) return 0;
  std::unordered_map<Storage*, int> ids;
  for (size_t i = 0; i < g.values.size(); ++i) ids[g.values[i].storage.get()] = int(i);
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].reads) readers[size_t(v)].push_back(int(i));
  GroupBuilder builder(g, ids, readers);
  std::vector<Node> out;
  int made = 0;
  for (size_t i = 0; i < g.nodes.size();) {
    size_t end = fusible(g.nodes[i]) ? builder.extent(i) : i + 1;
    if (end - i == 0 || (end - i == 1 && !(single_nodes && fusible(g.nodes[i])))) {
      out.push_back(std::move(g.nodes[i]));
      ++i;
      continue;
    }
    out.push_back(builder.build(i, end));
    ++made;
    i = end;
  }
  g.nodes = std::move(out);
  return made;
}

}  // namespace tide::trace
