// Programmatic edges (core/cuda/dependent_launch.h) are safe only for kernels that wait for
// their prerequisites before touching memory: the graph executor joins every kernel named
// in namespace tide (and the compiled chains' entry) that way when they are enabled. These
// tests read the sources, so they run without a GPU: every __global__ function in
// core/cuda and ops/cuda begins with await_prerequisite_grids(), and so does the source
// a compiled chain is made from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "ops/chain_source.h"

namespace tide {
namespace {

constexpr const char* kPrologue = "tide::cuda::await_prerequisite_grids();";

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The first statement of each __global__ function's body in `text`, with the name.
std::vector<std::pair<std::string, std::string>> first_statements(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> r;
  for (size_t at = text.find("__global__"); at != std::string::npos;
       at = text.find("__global__", at + 1)) {
    const size_t open = text.find('(', at), body = text.find('{', at);
    if (open == std::string::npos || body == std::string::npos) break;
    const size_t name_end = text.find_last_not_of(' ', open - 1) + 1;
    const size_t name_begin = text.find_last_of(" \n*", name_end - 1) + 1;
    const size_t first = text.find_first_not_of(" \n", body + 1);
    r.emplace_back(text.substr(name_begin, name_end - name_begin),
                   text.substr(first, text.find(';', first) + 1 - first));
  }
  return r;
}

TEST(KernelPrologues, EveryKernelAwaitsItsPrerequisitesFirst) {
  const std::filesystem::path root(TIDE_SOURCE_DIR);
  int kernels = 0;
  for (const char* dir : {"core/cuda", "ops/cuda"})
    for (const auto& e : std::filesystem::directory_iterator(root / dir)) {
      if (e.path().extension() != ".cu") continue;
      for (const auto& [name, first] : first_statements(read(e.path()))) {
        ++kernels;
        EXPECT_EQ(first, kPrologue) << e.path().filename().string() << ": " << name;
      }
    }
  EXPECT_GE(kernels, 31) << "the scan found fewer kernels than the library has";
  // The scan itself: a kernel without the prologue is seen.
  auto found = first_statements("template <class T>\n__global__ void k(T* x) {\n  x[0] = 1;\n}\n");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, "k");
  EXPECT_EQ(found[0].second, "x[0] = 1;");
}

TEST(KernelPrologues, ACompiledChainWaitsBeforeItReadsAnything) {
  float y[4];
  kernels::ChainStep s;
  s.functor = kernels::FunctorId::Add;
  s.a.kind = kernels::ChainOperand::mem;
  s.a.ptr = y;
  s.out = s.a;
  const std::string text = kernels::chain_kernel_source({&s, 1}, DType::float32);
  const size_t wait = text.find(kPrologue);
  ASSERT_NE(wait, std::string::npos) << text;
  EXPECT_LT(wait, text.find("if (count)")) << text;
  EXPECT_LT(wait, text.find("tide_functor<")) << text;
}

TEST(KernelPrologues, ProgrammaticEdgesAreOffUnlessAskedFor) {
  const bool before = cuda::programmatic_edges_enabled();
  cuda::set_programmatic_edges_enabled(true);
  EXPECT_TRUE(cuda::programmatic_edges_enabled());
  cuda::set_programmatic_edges_enabled(false);
  EXPECT_FALSE(cuda::programmatic_edges_enabled());
  cuda::set_programmatic_edges_enabled(before);
  const uint64_t n = cuda::programmatic_edges_added();
  cuda::note_programmatic_edges(2);
  EXPECT_EQ(cuda::programmatic_edges_added(), n + 2);
}

}  // namespace
}  // namespace tide
