// Compiled fused chains (ops/chain_source.h, ops/chain_compiler.h): the source a chain
// becomes, and NVRTC compiling it. Compiling needs no GPU, so these run wherever NVRTC
// loads (CI has the CUDA toolkit) and skip elsewhere; whether the compiled kernels give
// the interpreter's bits is checked on the host (test_chain_source_host.cpp: the text
// compiled by the host's compiler) and on a GPU (tests/cuda/test_cuda_trace.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/chain_compiler.h"
#include "ops/chain_source.h"
#include "tests/ops/chain_steps.h"

namespace tide::kernels {
namespace {

using namespace test_chain;  // mem, reg, scalar, step

// The sm every CUDA build targets (CMAKE_CUDA_ARCHITECTURES' default list has it).
constexpr int kSm = 90;

bool nvrtc_missing() {
  std::string why;
  if (!nvrtc_version(&why).empty()) return false;
  std::printf("NVRTC not loaded: %s\n", why.c_str());
  return true;
}

// y = (y + 1) * 0.5 - x: a loop body over its state y.
std::vector<ChainStep> loop_body(const void* y, const void* x, float one = 1, float half = 0.5f) {
  return {step(FunctorId::Add, mem(y), scalar(one), reg(0)),
          step(FunctorId::Mul, reg(0), scalar(half), reg(1)),
          step(FunctorId::Sub, reg(1), mem(x), mem(y))};
}

TEST(ChainSource, EveryFunctorCompilesOnEveryDtype) {
  if (nvrtc_missing()) GTEST_SKIP() << "NVRTC is not on this machine";
  float in[4], out[4];
  std::vector<ChainStep> steps;
  const int n = int(FunctorId::count_);
  for (int f = 0; f < n; ++f)  // each step on the previous one's register
    steps.push_back(step(FunctorId(f), f == 0 ? mem(in) : reg(uint8_t((f - 1) % 2)), scalar(2),
                         f == n - 1 ? mem(out) : reg(uint8_t(f % 2)), f == 3 ? 3 : 1));
  for (DType t : {DType::float32, DType::float64, DType::int32, DType::int64}) {
    const std::string source = chain_kernel_source(steps, t);
    const CompiledChain c = compile_chain(source, kSm);
    EXPECT_EQ(c.error, "") << name(t) << "\n" << source;
    EXPECT_FALSE(c.cubin.empty()) << name(t);
  }
}

TEST(ChainSource, AnIteratedBodyKeepsItsStateInRegistersAndCompiles) {
  if (nvrtc_missing()) GTEST_SKIP() << "NVRTC is not on this machine";
  float y[4], x[4];
  const std::string source = chain_kernel_source(loop_body(y, x), DType::float32);
  // The carried branch (chain::carried_for) loads y once and stores it once.
  EXPECT_NE(source.find("if (iterations > 1)"), std::string::npos) << source;
  const CompiledChain c = compile_chain(source, kSm);
  EXPECT_EQ(c.error, "") << source;
  EXPECT_FALSE(c.cubin.empty());
}

TEST(ChainSource, ABroadcastReadOfTheStateHasNoRegisterBranch) {
  float y[4], x[4];
  std::vector<ChainStep> steps = loop_body(y, x);
  steps[0].a = mem(y, 0);  // every element reads y[0]: plan_carried keeps memory
  const std::string source = chain_kernel_source(steps, DType::float32);
  EXPECT_EQ(source.find("if (iterations > 1)"), std::string::npos) << source;
  EXPECT_NE(source.find("m0a[0]"), std::string::npos) << source;
}

TEST(ChainSource, ChainsOfOneShapeShareOneSourceWhateverTheirValues) {
  float y1[4], x1[4], y2[8], x2[8];
  std::vector<ChainStep> a = loop_body(y1, x1, 1, 0.5), b = loop_body(y2, x2, 3, 0.25);
  std::memset(b[1].functor_bytes, 7, sizeof b[1].functor_bytes);
  EXPECT_EQ(chain_kernel_source(a, DType::float32), chain_kernel_source(b, DType::float32));
  // Another dtype, repeat, functor, or state is another kernel.
  EXPECT_NE(chain_kernel_source(a, DType::float32), chain_kernel_source(a, DType::float64));
  std::vector<ChainStep> c = a;
  c[1].repeat = 4;
  EXPECT_NE(chain_kernel_source(a, DType::float32), chain_kernel_source(c, DType::float32));
  c = a;
  c[1].functor = FunctorId::Div;
  EXPECT_NE(chain_kernel_source(a, DType::float32), chain_kernel_source(c, DType::float32));
  c = a;
  c[2].out = mem(x1);  // writes x, reads y: no longer a loop over its own state
  EXPECT_NE(chain_kernel_source(a, DType::float32), chain_kernel_source(c, DType::float32));
}

TEST(ChainSource, AChainItCannotWriteIsRefused) {
  float y[4];
  EXPECT_THROW(chain_kernel_source({}, DType::float32), Error);
  std::vector<ChainStep> bad = {step(FunctorId::Add, mem(y), scalar(1), reg(kMaxChainRegisters))};
  EXPECT_THROW(chain_kernel_source(bad, DType::float32), Error);
  bad = {step(FunctorId::count_, mem(y), scalar(1), mem(y))};
  EXPECT_THROW(chain_kernel_source(bad, DType::float32), Error);
  bad = {step(FunctorId::Add, mem(y), scalar(1), scalar(2))};
  EXPECT_THROW(chain_kernel_source(bad, DType::float32), Error);
}

// Separate kernels round a step's product before the next step adds to it, so the chain
// must not contract the two into an FMA. Only multiplies and adds with an explicit rounding
// mode (.rn) are safe: ptxas contracts plain mul.f32 and add.f32 even across the opaque
// asm barrier the chains once had (an H200 run gave eager's results +- 1 ulp, 2026-11-27).
TEST(ChainCompiler, NoStepsMultiplyIsContractedWithTheNextStepsAdd) {
  if (nvrtc_missing()) GTEST_SKIP() << "NVRTC is not on this machine";
  float y[4], x[4];
  for (DType t : {DType::float32, DType::float64}) {
    const std::string f = t == DType::float32 ? "f32" : "f64";
    const CompiledChain c = compile_chain(chain_kernel_source(loop_body(y, x), t), kSm);
    ASSERT_EQ(c.error, "");
    ASSERT_NE(c.ptx, "") << "NVRTC returns the PTX beside the CUBIN";
    EXPECT_NE(c.ptx.find("mul.rn." + f), std::string::npos) << c.ptx;
    EXPECT_NE(c.ptx.find("add.rn." + f), std::string::npos) << c.ptx;
    for (const std::string& contractible :
         {"\tmul." + f, "\tadd." + f, "\tsub." + f, "fma.rn." + f})
      EXPECT_EQ(c.ptx.find(contractible), std::string::npos) << contractible << " in\n" << c.ptx;
  }
}

TEST(ChainCompiler, ACompileErrorComesBackWithNvrtcsLog) {
  if (nvrtc_missing()) GTEST_SKIP() << "NVRTC is not on this machine";
  const CompiledChain c = compile_chain("this is not CUDA", kSm);
  EXPECT_TRUE(c.cubin.empty());
  EXPECT_NE(c.error.find("nvrtcCompileProgram (--gpu-architecture=sm_90)"), std::string::npos)
      << c.error;
  EXPECT_NE(c.error.find("error"), std::string::npos) << c.error;  // the log's own words
  // An architecture NVRTC does not know fails the same way, without a GPU.
  EXPECT_NE(compile_chain("", 1).error, "");
}

TEST(ChainCompiler, TheSwitchTurnsCompilationOffAndOn) {
  const bool before = compiled_chains_enabled();
  set_compiled_chains_enabled(false);
  EXPECT_FALSE(compiled_chains_enabled());
  set_compiled_chains_enabled(true);
  EXPECT_TRUE(compiled_chains_enabled());
  set_compiled_chains_enabled(before);
}

}  // namespace
}  // namespace tide::kernels
