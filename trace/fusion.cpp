#include "trace/fusion.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/thread_pool.h"
#include "ops/op_traits.h"
#include "ops/op_util.h"

namespace tide::trace {

double fusion_tolerance(DType dtype) { return dtype == DType::float64 ? 1e-12 : 1e-6; }

namespace {

bool same_operand(const FusedKernel::Operand& x, const FusedKernel::Operand& y) {
  if (x.kind != y.kind || x.stride != y.stride) return false;
  switch (x.kind) {
    case FusedKernel::Operand::reg: return x.reg_index == y.reg_index;
    case FusedKernel::Operand::mem: return x.storage == y.storage && x.offset == y.offset;
    case FusedKernel::Operand::scalar: return std::memcmp(x.value, y.value, sizeof(x.value)) == 0;
  }
  return false;
}

// A step that updates one register in place from an operand it does not write.
bool in_place_on_register(const FusedKernel::Step& s) {
  return s.iterate && s.a.kind == FusedKernel::Operand::reg &&
         s.out.kind == FusedKernel::Operand::reg && s.a.reg_index == s.out.reg_index &&
         !(s.b.kind == FusedKernel::Operand::reg && s.b.reg_index == s.out.reg_index);
}

// Equal functor bytes mean equal functors (stateless ones store no bytes); padding could
// only make equal functors look different, which leaves a run as separate steps.
bool same_step(const FusedKernel::Step& x, const FusedKernel::Step& y) {
  return x.block == y.block && std::memcmp(x.functor, y.functor, sizeof(x.functor)) == 0 &&
         same_operand(x.a, y.a) && same_operand(x.b, y.b) && same_operand(x.out, y.out);
}

}  // namespace

void FusedKernel::finalize() {
  hot.clear();
  mem.clear();
  for (size_t j = 0; j < steps.size(); ++j) {
    const Step& st = steps[j];
    if (j > 0 && in_place_on_register(st) && same_step(st, steps[j - 1])) {
      ++hot.back().repeat;  // re-rolled: the run's first step has the operands already
      continue;
    }
    Hot h;
    h.step = j;
    h.iterate = in_place_on_register(st) ? st.iterate : nullptr;
    h.block = st.block;
    h.functor = st.functor;
    const Operand* ops[3] = {&st.a, &st.b, &st.out};
    for (int k = 0; k < 3; ++k) {
      const Operand& o = *ops[k];
      h.stride[k] = int8_t(o.stride);
      h.is_reg[k] = o.kind == Operand::reg;
      h.advance[k] = o.kind == Operand::mem ? int8_t(o.stride) : 0;
      if (o.kind == Operand::reg)
        h.reg_offset[k] = uint32_t(size_t(o.reg_index) * size_t(kBlock) * elem_size);
      else if (o.kind == Operand::scalar) h.base[k] = const_cast<unsigned char*>(o.value);
      else mem.push_back({o.storage, size_t(o.offset) * elem_size, hot.size(), k});
    }
    hot.push_back(h);
  }
}

void FusedKernel::run(int64_t iterations) {
  // Memory operands resolve once per run (slots are bound before the program runs).
  for (const MemRef& m : mem)
    hot[m.step].base[m.operand] = static_cast<unsigned char*>(m.storage->data()) + m.byte_offset;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  int64_t grain = std::max<int64_t>(1, tide::detail::kParallelGrain / kBlock);
  const size_t esize = elem_size;
  // A loop body of one op on its state (y = f(y, b), b not the state): its iterate
  // function runs all iterations of a block in registers.
  bool one_op_in_place = false;
  if (hot.size() == 1 && hot[0].repeat == 1 && steps[0].iterate) {
    const Hot& h = hot[0];
    const unsigned char *state = h.base[0], *end = state + size_t(n) * esize;
    bool b_is_state = !h.is_reg[1] && h.base[1] >= state && h.base[1] < end;
    one_op_in_place = !h.is_reg[0] && !h.is_reg[2] && state == h.base[2] && h.advance[0] == 1 &&
                      h.advance[2] == 1 && !b_is_state;
  }
  // One Hot over a block: a single step, or a re-rolled run of identical in-place steps.
  auto apply = [](const Hot& h, unsigned char* const* p, int64_t len) {
    if (h.repeat > 1) h.iterate(h.functor, p[1], h.stride[1], p[2], len, h.repeat);
    else h.block(h.functor, p[0], h.stride[0], p[1], h.stride[1], p[2], len);
  };
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    alignas(64) unsigned char regs[kMaxRegisters * kBlock * 8];
    for (int64_t b = b0; b < b1; ++b) {
      int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
      if (iterations > 1 && one_op_in_place) {
        const Hot& h = hot[0];
        steps[0].iterate(h.functor, h.base[1] + size_t(i0 * h.advance[1]) * esize, h.stride[1],
                         h.base[2] + size_t(i0) * esize, len, iterations);
        continue;
      }
      if (iterations > 1 && hot.size() <= kMaxIteratedSteps) {
        // A loop body: the operands of a block do not change between iterations.
        unsigned char* ptr[kMaxIteratedSteps][3];
        for (size_t j = 0; j < hot.size(); ++j)
          for (int k = 0; k < 3; ++k)
            ptr[j][k] = hot[j].is_reg[k] ? regs + hot[j].reg_offset[k]
                                         : hot[j].base[k] + size_t(i0 * hot[j].advance[k]) * esize;
        for (int64_t it = 0; it < iterations; ++it)
          for (size_t j = 0; j < hot.size(); ++j) apply(hot[j], ptr[j], len);
        continue;
      }
      for (int64_t it = 0; it < iterations; ++it)
        for (const Hot& h : hot) {
          unsigned char* p[3];
          for (int k = 0; k < 3; ++k)
            p[k] = h.is_reg[k] ? regs + h.reg_offset[k]
                               : h.base[k] + size_t(i0 * h.advance[k]) * esize;
          apply(h, p, len);
        }
    }
  });
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
    while (end - begin > 1 && registers_needed(begin, end) > FusedKernel::kMaxRegisters) --end;
    return end;
  }

  Node build(size_t begin, size_t end) {
    auto fk = std::make_shared<FusedKernel>();
    const Node& first = g_.nodes[begin];
    fk->n = first.ew->n;
    fk->elem_size = size_of(first.ew->in);
    fk->dtype = first.ew->in;
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
      FusedKernel::Step s;
      s.block = n.ew->block;
      s.iterate = n.ew->iterate;
      s.functor_id = n.ew->functor_id;
      std::memcpy(s.functor, n.ew->functor, sizeof(s.functor));
      s.a = operand(n.ew->a, reg_of, out, add_unique);
      if (n.ew->arity == 2) s.b = operand(n.ew->b, reg_of, out, add_unique);
      else {
        s.b.kind = FusedKernel::Operand::scalar;
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
        s.out.kind = FusedKernel::Operand::mem;
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
          r = fk->registers++;
        }
        s.out.kind = FusedKernel::Operand::reg;
        s.out.reg_index = r;
        s.out.stride = 1;
        reg_of[v] = r;
        g_.values[size_t(v)].kind = ValueKind::dead;
      }
      fk->steps.push_back(s);
    }
    fk->finalize();
    out.fused = fk;
    out.kernel = [fk](const KernelContext&) { fk->run(); };
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
  FusedKernel::Operand operand(const tide::detail::EwOperand& o,
                               const std::unordered_map<int, int>& reg_of, Node& out,
                               AddUnique add_unique) {
    FusedKernel::Operand r;
    if (!o.storage) {
      r.kind = FusedKernel::Operand::scalar;
      r.stride = 0;
      std::memcpy(r.value, o.scalar, sizeof(r.value));
      return r;
    }
    int v = ids_.at(o.storage);
    if (auto it = reg_of.find(v); it != reg_of.end()) {
      r.kind = FusedKernel::Operand::reg;
      r.reg_index = it->second;
      r.stride = 1;
      return r;
    }
    r.kind = FusedKernel::Operand::mem;
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
