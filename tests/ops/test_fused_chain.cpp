// The fused-chain interpreter (ops/fused_chain.h) that the CUDA kernel runs: an iterated chain (a
// fused loop body) keeps its state buffers in registers (chain::plan_carried) with the same bits as
// going through memory, one step on its own state as one register run; a repeated step applies its
// functor `repeat` times; a broadcast read of a state buffer keeps memory; the CPU entry, block by
// block, gives the interpreter's bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ops/fused_chain.h"
#include "tests/ops/chain_steps.h"

namespace tide::kernels {
namespace {

using namespace test_chain;  // mem, reg, scalar, step

// y = (y + 1) * 0.5 - x, `iterations` times per element: through memory, or carried.
std::vector<float> run(bool carried, const std::vector<float>& x, int64_t iterations) {
  std::vector<float> y(x.size(), 3.0f);
  const ChainStep steps[] = {
      step(FunctorId::Add, mem(y.data()), scalar(1), reg(0)),
      step(FunctorId::Mul, reg(0), scalar(0.5f), reg(1)),
      step(FunctorId::Sub, reg(1), mem(x.data()), mem(y.data())),
  };
  chain::Carried c;
  const bool planned = chain::plan_carried(steps, 3, &c);
  EXPECT_TRUE(planned);
  EXPECT_EQ(c.n, 1);
  for (int64_t i = 0; i < int64_t(x.size()); ++i)
    run_chain_element<float>(steps, 3, i, iterations, carried && planned ? &c : nullptr);
  return y;
}

TEST(FusedChain, StateCarriedInRegistersGivesTheSameBitsAsMemory) {
  std::vector<float> x = {0.1f, -2.5f, 7.0f, 1e-3f, 0};
  for (int64_t iterations : {1, 2, 1000}) {
    std::vector<float> through_memory = run(false, x, iterations),
                       carried = run(true, x, iterations);
    EXPECT_EQ(0, std::memcmp(through_memory.data(), carried.data(), x.size() * sizeof(float)))
        << iterations << " iterations";
    // And what the separate ops compute, in float.
    for (size_t i = 0; i < x.size(); ++i) {
      float y = 3.0f;
      for (int64_t it = 0; it < iterations; ++it) y = (y + 1.0f) * 0.5f - x[i];
      EXPECT_EQ(carried[i], y) << "element " << i << ", " << iterations << " iterations";
    }
  }
}

TEST(FusedChain, ABroadcastReadOfTheStateKeepsItInMemory) {
  std::vector<float> y(4, 1.0f);
  const ChainStep steps[] = {
      step(FunctorId::Add, mem(y.data()), mem(y.data(), /*stride=*/0), mem(y.data())),
  };
  chain::Carried c;
  EXPECT_FALSE(chain::plan_carried(steps, 1, &c)) << "element 0 is read by every element";
  const ChainStep reads_only[] = {step(FunctorId::Add, mem(y.data()), scalar(1), reg(0))};
  EXPECT_FALSE(chain::plan_carried(reads_only, 1, &c)) << "writes no memory: nothing to carry";
}

// y = y + b (b a scalar or an input) run `iterations` times: one register run of
// repeat * iterations adds (Carried::single_run), the same bits as memory, iteration by
// iteration. y = y * y reads its own state as b: iterated step by step.
TEST(FusedChain, OneStepOnItsOwnStateIsOneRegisterRun) {
  const std::vector<float> x = {0.5f, -3.0f, 1e-3f};
  for (bool input_b : {false, true}) {
    for (int64_t repeat : {1, 3}) {
      std::vector<float> carried(3, 0.25f), memory(3, 0.25f);
      auto chain_on = [&](std::vector<float>& y) {
        return step(FunctorId::Add, mem(y.data()), input_b ? mem(x.data()) : scalar(0.1f),
                    mem(y.data()), repeat);
      };
      const ChainStep c_steps[] = {chain_on(carried)}, m_steps[] = {chain_on(memory)};
      chain::Carried c;
      ASSERT_TRUE(chain::plan_carried(c_steps, 1, &c));
      EXPECT_TRUE(c.single_run);
      for (int64_t i = 0; i < 3; ++i) {
        run_chain_element<float>(c_steps, 1, i, 1000, &c);
        run_chain_element<float>(m_steps, 1, i, 1000);
      }
      for (size_t i = 0; i < 3; ++i) {
        float y = 0.25f;
        for (int64_t k = 0; k < 1000 * repeat; ++k) y += input_b ? x[i] : 0.1f;
        EXPECT_EQ(carried[i], y) << "element " << i << ", repeat " << repeat;
        EXPECT_EQ(memory[i], y) << "element " << i << ", repeat " << repeat;
      }
    }
  }
  std::vector<float> y = {1.0001f, 0.999f};
  const ChainStep square[] = {step(FunctorId::Mul, mem(y.data()), mem(y.data()), mem(y.data()))};
  chain::Carried c;
  ASSERT_TRUE(chain::plan_carried(square, 1, &c));
  EXPECT_FALSE(c.single_run) << "b is the state: it changes every iteration";
  std::vector<float> want = y;
  for (float& v : want)
    for (int k = 0; k < 20; ++k) v = v * v;
  for (int64_t i = 0; i < 2; ++i) run_chain_element<float>(square, 1, i, 20, &c);
  EXPECT_EQ(y, want);
  const ChainStep two[] = {step(FunctorId::Add, mem(y.data()), scalar(1), reg(0)),
                           step(FunctorId::Mul, reg(0), scalar(0.5f), mem(y.data()))};
  ASSERT_TRUE(chain::plan_carried(two, 2, &c));
  EXPECT_FALSE(c.single_run) << "two steps iterate step by step";
}

TEST(FusedChain, ARepeatedStepAppliesItsFunctorThatManyTimes) {
  std::vector<float> y = {0.25f, 1e7f};
  const ChainStep steps[] = {step(FunctorId::Add, mem(y.data()), scalar(1), mem(y.data()), 10000)};
  for (int64_t i = 0; i < 2; ++i) run_chain_element<float>(steps, 1, i, 1);
  float a = 0.25f, b = 1e7f;
  for (int k = 0; k < 10000; ++k) {
    a += 1.0f;
    b += 1.0f;
  }
  EXPECT_EQ(y[0], a);
  EXPECT_EQ(y[1], b);
}

// The CPU entry (cpu::fused_chain) runs chains block by block with each functor's loops; it
// must give the per-element interpreter's bits. 1000 elements: several blocks and a tail;
// a broadcast input, scalars, a unary step, a repeated register step and a count read
// from memory.
TEST(FusedChain, TheCpuEntryGivesTheInterpretersBits) {
  constexpr int64_t n = 1000;
  std::vector<float> x(n), w = {0.75f};
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 37) * 0.05f - 0.9f;
  auto body = [&](std::vector<float>& y) {
    return std::vector<ChainStep>{
        step(FunctorId::Add, mem(y.data()), scalar(1), reg(0)),
        step(FunctorId::Mul, reg(0), mem(w.data(), /*stride=*/0), reg(1)),
        step(FunctorId::Tanh, reg(1), scalar(0), reg(1)),
        step(FunctorId::Add, reg(1), scalar(0.25f), reg(1), /*repeat=*/5),
        step(FunctorId::Sub, reg(1), mem(x.data()), mem(y.data())),
    };
  };
  for (int64_t iterations : {1, 3}) {
    for (size_t num_steps : {size_t(5), size_t(1)}) {  // one step: y = y + 1 on its state
      std::vector<float> block(x), element(x);
      std::vector<ChainStep> b_steps = body(block), e_steps = body(element);
      if (num_steps == 1) {
        b_steps = {step(FunctorId::Add, mem(block.data()), mem(x.data()), mem(block.data()))};
        e_steps = {step(FunctorId::Add, mem(element.data()), mem(x.data()), mem(element.data()))};
      }
      const int64_t count = iterations;
      FusedChain c;
      c.steps = b_steps.data();
      c.num_steps = int(num_steps);
      c.n = n;
      c.count = &count;
      cpu::fused_chain(cpu_kernel_context(), c, {});
      for (int64_t i = 0; i < n; ++i)
        run_chain_element<float>(e_steps.data(), int(num_steps), i, iterations);
      EXPECT_EQ(0, std::memcmp(block.data(), element.data(), n * sizeof(float)))
          << num_steps << " steps, " << iterations << " iterations";
      EXPECT_NE(block, x) << "the chain ran";
    }
  }
}

}  // namespace
}  // namespace tide::kernels
