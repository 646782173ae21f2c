// The source a fused chain becomes (ops/chain_source.h), run without a GPU: the text is
// compiled by the host's C++ compiler (the one that built tide) with a few lines that stand
// in for CUDA's (__global__, threadIdx, ...), loaded with dlopen, and run block by block,
// thread by thread, on the CPU. Its results must be the interpreter's bits (ops/cpu's
// fused_chain over the same steps). This checks what the text computes: the offsets it
// reads the program at, its carried registers, repeats, counts and broadcasts. It does not
// check NVRTC's compile, the CUDA loader or nvcc's arithmetic; the GPU test
// CudaTrace.CompiledChainsGiveTheInterpretersAndEagersBits does.
//
// The one edit to the text: its optimisation barrier names a GPU register class ("+f",
// "+d"), so on the host it becomes a memory barrier ("+m"), which holds the value the same.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/shared_library.h"
#include "ops/chain_source.h"
#include "ops/fused_chain.h"
#include "tests/ops/chain_steps.h"

namespace tide::kernels {
namespace {

using namespace test_chain;  // mem, reg, step

// The host runner each case gets: the kernel run for every (block, thread) of the grid.
using HostRun = void (*)(const unsigned char* steps, long long n, long long iterations,
                         const void* count, int count_dtype, unsigned blocks, unsigned threads);

// Stands in for what CUDA gives a kernel.
constexpr const char* kPrelude = R"(#include <string.h>
#include "ops/functors.h"
struct tide_host_dim3 { unsigned x = 0, y = 0, z = 0; };
static tide_host_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#include "core/cuda/await_grids.h"
)";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The kernel of `source`, renamed kernel_<k> in namespace case_<k>, and its runner run_<k>.
std::string host_case(const std::string& source, int k) {
  const std::string kernel = detail::concat("kernel_", k);
  std::string text = replaced(source, std::string(kChainKernelName) + "(", kernel + "(");
  text = replaced(text, "\"+f\"(v)", "\"+m\"(v)");
  text = replaced(text, "\"+d\"(v)", "\"+m\"(v)");
  return detail::concat(
      "namespace case_", k, " {\n", text, "}\n", "extern \"C\" void run_", k,
      "(const unsigned char* s, long long n, long long it, const void* c, int cd, unsigned b, "
      "unsigned t) {\n  gridDim.x = b; blockDim.x = t;\n",
      "  for (blockIdx.x = 0; blockIdx.x < b; ++blockIdx.x)\n",
      "    for (threadIdx.x = 0; threadIdx.x < t; ++threadIdx.x) case_", k, "::", kernel,
      "(s, n, it, c, cd);\n}\n");
}

// Compiles the sources into one library in a fresh directory; "" and *lib set, or why not.
std::string compile_on_host(const std::vector<std::string>& sources, void** lib) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / detail::concat("tide_chain_host_", getpid());
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "chains.cpp");
    f << kPrelude;
    for (size_t k = 0; k < sources.size(); ++k) f << host_case(sources[k], int(k));
  }
  const std::string cmd =
      detail::concat("'", TIDE_TEST_CXX, "' -std=c++20 -O2 -fPIC -shared -w -I'", TIDE_SOURCE_DIR,
                     "' -o '", (dir / "chains.so").string(), "' '", (dir / "chains.cpp").string(),
                     "' > '", (dir / "log").string(), "' 2>&1");
  std::string why;
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir / "log");
    why = detail::concat("the host compiler failed: ", cmd, "\n",
                         std::string(std::istreambuf_iterator<char>(log), {}));
  } else if (!(*lib = dlopen((dir / "chains.so").c_str(), RTLD_NOW | RTLD_LOCAL))) {
    why = detail::concat("dlopen: ", dlerror());
  }
  if (why.empty()) fs::remove_all(dir);  // kept to look at when something failed
  return why;
}

// One chain on fresh buffers: `make` builds the steps over the buffers it is given.
struct Case {
  std::string name;
  DType dtype;
  int64_t n;
  int num_buffers;
  std::function<std::vector<ChainStep>(std::vector<unsigned char*>)> make;
  int64_t iterations = 1;
  // A count tensor of count_dtype holding `count` (count_dtype int64 with count unset:
  // none, `iterations` is used).
  double count = NAN;
  DType count_dtype = DType::int64;
};

// A chain's buffers, filled with the same values for both runs.
struct Buffers {
  std::vector<std::vector<unsigned char>> bytes;
  std::vector<unsigned char*> pointers() {
    std::vector<unsigned char*> p;
    for (auto& b : bytes) p.push_back(b.data());
    return p;
  }
};

Buffers filled(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  Buffers b;
  for (int j = 0; j < c.num_buffers; ++j) {
    b.bytes.emplace_back(size_t(c.n) * size_of(c.dtype));
    dispatch_storage(c.dtype, [&](auto z) {
      using T = decltype(z);
      auto* p = reinterpret_cast<T*>(b.bytes.back().data());
      for (int64_t i = 0; i < c.n; ++i) p[i] = T(u(rng));
    });
  }
  return b;
}

std::vector<unsigned char> count_bytes(const Case& c) {
  std::vector<unsigned char> bytes(8);
  dispatch_dtype(c.count_dtype, [&](auto z) {
    using T = decltype(z);
    const T v = T(c.count);
    std::memcpy(bytes.data(), &v, sizeof v);
  });
  return bytes;
}

FusedChain chain_of(const Case& c, const std::vector<ChainStep>& steps, const void* count) {
  FusedChain f;
  f.steps = steps.data();
  f.num_steps = int(steps.size());
  f.n = c.n;
  f.dtype = c.dtype;
  f.iterations = c.iterations;
  if (!std::isnan(c.count)) {
    f.count = count;
    f.count_dtype = c.count_dtype;
  }
  return f;
}

// A scalar operand holding v as the chain's dtype reads it.
ChainOperand scalar_of(DType t, double v) {
  ChainOperand o;
  dispatch_storage(t, [&](auto z) {
    const decltype(z) x = decltype(z)(v);
    std::memcpy(&o.scalar_bits, &x, sizeof x);
  });
  return o;
}

// y = (y + 1) * 0.5 - x on buffers {y, x}: a loop body over its state y.
std::vector<ChainStep> loop_body(DType t, std::vector<unsigned char*> b) {
  return {step(FunctorId::Add, mem(b[0]), scalar_of(t, 1), reg(0)),
          step(FunctorId::Mul, reg(0), scalar_of(t, 0.5), reg(1)),
          step(FunctorId::Sub, reg(1), mem(b[1]), mem(b[0]))};
}
auto loop_body_of(DType t) {
  return [t](std::vector<unsigned char*> b) { return loop_body(t, b); };
}

// Every listed functor on buffers {x, z, out_0, out_1, ...}: r = F(x, b), then
// out_f = Identity(r), b taking turns between a scalar, z and the previous functor's
// register. Each functor's result is checked on its own (a chain of them all in a row
// would be constant after Second or Never).
std::vector<ChainStep> every_functor(DType t, std::vector<unsigned char*> b) {
  std::vector<ChainStep> steps;
  for (int f = 0; f < int(FunctorId::count_); ++f) {
    const FunctorId id = FunctorId(f);
    ChainOperand other = f % 3 == 1   ? mem(b[1])
                         : f % 3 == 2 ? reg(uint8_t((f + 1) % 2))
                                      : scalar_of(t, 2);
    if (id == FunctorId::Div) other = scalar_of(t, 2);  // no integer division by zero
    ChainStep s = step(id, mem(b[0]), other, reg(uint8_t(f % 2)), id == FunctorId::Mul ? 3 : 1);
    // Parameters the kernel must read from the program: AddScaled's alpha, Pow's exponent,
    // DropoutKeep's p and scale (both of its 16 bytes).
    if (id == FunctorId::AddScaled) {
      const fn::AddScaled p{-0.75};
      std::memcpy(s.functor_bytes, &p, sizeof p);
    } else if (id == FunctorId::Pow) {
      const fn::Pow p{3.0};
      std::memcpy(s.functor_bytes, &p, sizeof p);
    } else if (id == FunctorId::DropoutKeep) {
      const fn::DropoutKeep p{-0.5, 2.0};
      std::memcpy(s.functor_bytes, &p, sizeof p);
    }
    steps.push_back(s);
    steps.push_back(step(FunctorId::Identity, reg(uint8_t(f % 2)), {}, mem(b[2 + f])));
  }
  return steps;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (DType t : {DType::float32, DType::float64, DType::int32, DType::int64, DType::bfloat16,
                  DType::float16})
    all.push_back({detail::concat("every functor, ", name(t)), t, 1000, 2 + int(FunctorId::count_),
                   [t](std::vector<unsigned char*> b) { return every_functor(t, b); }});
  for (DType t : {DType::float32, DType::float64})
    all.push_back(
        {detail::concat("a loop body in registers, ", name(t)), t, 1000, 2, loop_body_of(t), 7});
  all.push_back({"a loop body iterated once (memory as written)", DType::float32, 1000, 2,
                 loop_body_of(DType::float32), 1});
  all.push_back({"one step on its own state: one register run", DType::float32, 777, 1,
                 [](std::vector<unsigned char*> b) {
                   return std::vector<ChainStep>{step(
                       FunctorId::Add, mem(b[0]), scalar_of(DType::float32, 0.1), mem(b[0]), 4)};
                 },
                 250});
  all.push_back({"a broadcast read of the state keeps memory", DType::float32, 1000, 2,
                 [](std::vector<unsigned char*> b) {
                   std::vector<ChainStep> s = loop_body(DType::float32, b);
                   s[0].a = mem(b[0], 0);
                   return s;
                 },
                 5});
  Case counted{"an int32 count tensor",
               DType::float64,
               600,
               2,
               loop_body_of(DType::float64),
               1,
               9,
               DType::int32};
  all.push_back(counted);
  counted.name = "a float32 count tensor, 3.75 (3 iterations)";
  counted.count = 3.75;
  counted.count_dtype = DType::float32;
  all.push_back(counted);
  counted.name = "a count below zero runs none";
  counted.count = -4;
  counted.count_dtype = DType::int64;
  all.push_back(counted);
  // Invalid (core/loop_count.h): a plain conversion would loop for ever on a GPU.
  counted.name = "a float64 count beyond int64 runs none";
  counted.count = 1e30;
  counted.count_dtype = DType::float64;
  all.push_back(counted);
  all.push_back({"two states, one register each", DType::int64, 500, 3,
                 [](std::vector<unsigned char*> b) {
                   return std::vector<ChainStep>{
                       step(FunctorId::Add, mem(b[0]), mem(b[1]), mem(b[0])),
                       step(FunctorId::Sub, mem(b[1]), mem(b[2]), mem(b[1]))};
                 },
                 11});
  return all;
}

TEST(ChainSourceOnTheHost, EveryCaseGivesTheInterpretersBits) {
  const std::vector<Case> all = cases();
  // Each case built twice on other buffers: the interpreter's and the compiled text's.
  std::vector<Buffers> ours, theirs;
  std::vector<std::vector<ChainStep>> our_steps, their_steps;
  std::vector<std::string> sources;
  for (size_t k = 0; k < all.size(); ++k) {
    ours.push_back(filled(all[k], unsigned(k)));
    theirs.push_back(filled(all[k], unsigned(k)));
    our_steps.push_back(all[k].make(ours[k].pointers()));
    their_steps.push_back(all[k].make(theirs[k].pointers()));
    sources.push_back(chain_kernel_source(their_steps[k], all[k].dtype));
    ASSERT_EQ(sources[k], chain_kernel_source(our_steps[k], all[k].dtype)) << all[k].name;
  }
  void* lib = nullptr;
  const std::string why = compile_on_host(sources, &lib);
  ASSERT_EQ(why, "");
  for (size_t k = 0; k < all.size(); ++k) {
    SCOPED_TRACE(all[k].name);
    const Case& c = all[k];
    const std::vector<unsigned char> count = count_bytes(c);
    cpu::fused_chain(KernelContext{}, chain_of(c, our_steps[k], count.data()), NoExtra{});
    HostRun run = nullptr;
    detail::bind_symbol(lib, run, detail::concat("run_", k).c_str(), "the host chains", "test");
    const FusedChain f = chain_of(c, their_steps[k], count.data());
    // Three blocks of 256 threads: fewer threads than elements, so the grid strides.
    run(reinterpret_cast<const unsigned char*>(f.steps), f.n, f.iterations, f.count,
        int(f.count_dtype), 3, 256);
    for (int j = 0; j < c.num_buffers; ++j)
      EXPECT_EQ(ours[k].bytes[j], theirs[k].bytes[j]) << "buffer " << j << "\n" << sources[k];
  }
  // The cases changed what they wrote (a test that compared two untouched copies would pass).
  for (int j = 2; j < all[0].num_buffers; ++j)
    EXPECT_NE(ours[0].bytes[j], filled(all[0], 0).bytes[j]) << "functor " << j - 2;
  EXPECT_EQ(ours[all.size() - 2].bytes, filled(all[all.size() - 2], unsigned(all.size() - 2)).bytes)
      << "a negative count must leave the state as it was";
}

}  // namespace
}  // namespace tide::kernels
