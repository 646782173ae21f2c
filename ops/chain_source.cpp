#include "ops/chain_source.h"

#include <cstddef>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace tide::kernels {

namespace {

struct FunctorName {
  const char* name;
  bool unary;
};
constexpr FunctorName kFunctorNames[] = {
#define TIDE_CHAIN_BINARY(F) {#F, false},
#define TIDE_CHAIN_UNARY(F) {#F, true},
    TIDE_BINARY_FUNCTORS(TIDE_CHAIN_BINARY) TIDE_MASK_FUNCTORS(TIDE_CHAIN_BINARY)
        TIDE_UNARY_FUNCTORS(TIDE_CHAIN_UNARY)
#undef TIDE_CHAIN_BINARY
#undef TIDE_CHAIN_UNARY
};
static_assert(std::size(kFunctorNames) == size_t(FunctorId::count_),
              "every FunctorId needs its name, in the order of the lists");

const char* c_type(DType t) {
  switch (t) {
    case DType::float32: return "float";
    case DType::float64: return "double";
    case DType::int32: return "int";
    case DType::int64: return "long long";
    // tide's own types (core/float16.h, which functors.h includes), not CUDA's __nv_bfloat16
    // and __half: their conversions give the CPU's bits, NaN payloads included.
    case DType::bfloat16: return "tide::bfloat16";
    case DType::float16: return "tide::float16";
  }
  TIDE_ASSERT(false, "a fused chain of ", t);
  return "float";
}

// Byte offsets into the uploaded program, where the kernel reads what may change.
size_t step_at(int s) { return size_t(s) * sizeof(ChainStep); }
size_t operand_at(int s, int which) {  // which: 0 a, 1 b, 2 out
  const size_t o[] = {offsetof(ChainStep, a), offsetof(ChainStep, b), offsetof(ChainStep, out)};
  return step_at(s) + o[which];
}

// One operand's expression inside the element loop: a register, the element of its
// memory, or its scalar. `carried` (>= 0) is the register that stands for its memory.
std::string operand_expr(const ChainOperand& o, int s, int which, int carried) {
  const std::string id = detail::concat(s, "abo"[which]);
  if (carried >= 0) return detail::concat("r", carried);
  switch (o.kind) {
    case ChainOperand::reg: return detail::concat("r", int(o.reg_index));
    case ChainOperand::mem:
      if (o.stride == 0) return detail::concat("m", id, "[0]");
      if (o.stride == 1) return detail::concat("m", id, "[i]");
      return detail::concat("m", id, "[i * ", int(o.stride), "]");
    case ChainOperand::scalar: return detail::concat("s", id);
  }
  return "";
}

// The steps once (one iteration), as the interpreter's run_chain_element runs them; with
// `c`, the state buffers stand in registers (plan_carried's plan).
void emit_steps(std::ostringstream& k, std::span<const ChainStep> steps, const chain::Carried* c) {
  for (int s = 0; s < int(steps.size()); ++s) {
    const ChainStep& st = steps[s];
    const bool unary = kFunctorNames[size_t(st.functor)].unary;
    const std::string f = detail::concat("f", s);
    const std::string a = operand_expr(st.a, s, 0, c ? c->a[s] : -1);
    std::string out;
    if (st.out.kind == ChainOperand::reg) out = detail::concat("r", int(st.out.reg_index));
    else if (c) out = detail::concat("r", int(c->out[s]));
    else out = detail::concat("m", s, "o[i]");
    k << "        {\n";
    if (!unary)
      k << "          const T b = " << operand_expr(st.b, s, 1, c ? c->b[s] : -1) << ";\n";
    // widen(): a 16-bit T computes in float and rounds to T per step, as the unfused op.
    const std::string call =
        detail::concat(f, unary ? "(tide::widen(v))" : "(tide::widen(v), tide::widen(b))");
    k << "          T v = " << a << ";\n";
    k << "          v = T(" << call << ");\n";
    if (st.repeat > 1)
      k << "          for (long long k = 1; k < " << st.repeat << "LL; ++k) v = T(" << call
        << ");\n";
    k << "          " << out << " = v;\n";
    k << "        }\n";
  }
}

}  // namespace

std::string chain_kernel_source(std::span<const ChainStep> steps, DType dtype) {
  TIDE_CHECK(!steps.empty(), "fused chain", "a chain to compile needs at least one step");
  for (const ChainStep& st : steps) {
    TIDE_CHECK(st.functor < FunctorId::count_, "fused chain", "a step's functor id ",
               int(st.functor), " is not a listed functor");
    for (const ChainOperand* o : {&st.a, &st.b, &st.out})
      TIDE_CHECK(o->kind != ChainOperand::reg || o->reg_index < kMaxChainRegisters, "fused chain",
                 "register r", int(o->reg_index), " beyond the ", kMaxChainRegisters,
                 " a chain has");
    TIDE_CHECK(st.out.kind != ChainOperand::scalar, "fused chain",
               "a step's result goes to a register or to memory, not to a scalar");
  }
  chain::Carried plan;
  const bool carried = chain::plan_carried(steps.data(), int(steps.size()), &plan);
  const char* t = c_type(dtype);

  std::ostringstream k;
  k << "// tide: a fused chain of " << steps.size() << " steps on " << name(dtype)
    << " (ops/chain_source.cpp)\n";
  k << "#include \"ops/functors.h\"\n";
  k << "#include \"core/cuda/await_grids.h\"\n";
  k << "typedef " << t << " T;\n";
  k << "template <class F> __device__ __forceinline__ F tide_functor(const unsigned char* p) {"
       " F f; memcpy(&f, p, sizeof(F)); return f; }\n";
  k << "extern \"C\" __global__ void __launch_bounds__(256) " << kChainKernelName
    << "(const unsigned char* steps, long long n, long long iterations, const void* count, "
       "int count_dtype) {\n";
  // As every kernel of tide's: the graph executor may join this one to the kernel before
  // it by a programmatic edge (core/cuda/dependent_launch.h).
  k << "  tide::cuda::await_prerequisite_grids();\n";
  // chain::iterations_of: a count tensor is read where it lives, when the kernel runs.
  // A float count as loop_count_of_real (core/loop_count.h) reads it.
  k << "  if (count) {\n"
    << "    if (count_dtype == " << int(DType::float32)
    << " || count_dtype == " << int(DType::float64) << ") {\n"
    << "      const double real = count_dtype == " << int(DType::float32)
    << " ? *(const float*)count : *(const double*)count;\n"
    << "      iterations = real > -9223372036854775808.0 && real < 9223372036854775808.0 ? "
       "(long long)real : (long long)(-9223372036854775807LL - 1);\n"
    << "    } else if (count_dtype == " << int(DType::int32)
    << ") iterations = *(const int*)count;\n"
    << "    else iterations = *(const long long*)count;\n"
    << "  }\n"
    << "  if (iterations <= 0) return;\n";
  // What may change between replays, read from the program once per thread.
  for (int s = 0; s < int(steps.size()); ++s) {
    const ChainStep& st = steps[s];
    k << "  const auto f" << s
      << " = tide_functor<tide::fn::" << kFunctorNames[size_t(st.functor)].name << ">(steps + "
      << step_at(s) + offsetof(ChainStep, functor_bytes) << ");\n";
    const ChainOperand* ops[3] = {&st.a, &st.b, &st.out};
    for (int w = 0; w < 3; ++w) {
      const std::string id = detail::concat(s, "abo"[w]);
      if (w == 1 && kFunctorNames[size_t(st.functor)].unary) continue;
      if (ops[w]->kind == ChainOperand::mem)
        k << "  T* const m" << id << " = *(T* const*)(steps + "
          << operand_at(s, w) + offsetof(ChainOperand, ptr) << ");\n";
      else if (ops[w]->kind == ChainOperand::scalar && w < 2)
        k << "  T s" << id << "; memcpy(&s" << id << ", steps + "
          << operand_at(s, w) + offsetof(ChainOperand, scalar_bits) << ", sizeof(T));\n";
    }
  }
  k << "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;"
       " i += (long long)gridDim.x * blockDim.x) {\n";
  k << "    T r0{}";
  for (int r = 1; r < kMaxChainRegisters; ++r) k << ", r" << r << "{}";
  k << ";\n";
  if (carried) {
    // chain::carried_for: an iterated chain keeps its state in registers.
    // State buffer j's element, through the variable of the first step that writes it.
    std::vector<std::string> state(size_t(plan.n));
    for (int j = 0; j < plan.n; ++j)
      for (int s = 0; s < int(steps.size()) && state[j].empty(); ++s)
        if (steps[s].out.kind == ChainOperand::mem && steps[s].out.ptr == plan.ptr[j])
          state[j] = detail::concat("m", s, "o[i]");
    k << "    if (iterations > 1) {\n";
    for (int j = 0; j < plan.n; ++j)
      k << "      r" << int(plan.reg[j]) << " = " << state[j] << ";\n";
    k << "      for (long long it = 0; it < iterations; ++it) {\n";
    emit_steps(k, steps, &plan);
    k << "      }\n";
    for (int j = 0; j < plan.n; ++j)
      k << "      " << state[j] << " = r" << int(plan.reg[j]) << ";\n";
    k << "      continue;\n";
    k << "    }\n";
  }
  k << "    for (long long it = 0; it < iterations; ++it) {\n";
  emit_steps(k, steps, nullptr);
  k << "    }\n";
  k << "  }\n";
  k << "}\n";
  return k.str();
}

}  // namespace tide::kernels
