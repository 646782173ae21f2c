// The message format of a failed CUDA, cuBLASLt, cuDNN or NCCL call (core/cuda/call_name.h),
// checked on the CPU: the GPU tests match on "<function> failed", which a message quoting
// the whole stringised call would never contain.
#include <gtest/gtest.h>

#include "core/cuda/call_name.h"

namespace tide::cuda {
namespace {

// What TIDE_CUDA_CHECK hands the error path: the call as the preprocessor spells it.
#define TIDE_TEST_STRINGISE(call) #call

TEST(LibraryErrors, NameTheFunctionNotItsArguments) {
  EXPECT_EQ(call_name(TIDE_TEST_STRINGISE(
                cudaGraphAddMemcpyNode1D(&node, g, deps.data(), deps.size(), dst, src, n, kind))),
            "cudaGraphAddMemcpyNode1D");
  EXPECT_EQ(call_name("cudaMalloc(&p, bytes)"), "cudaMalloc");
  EXPECT_EQ(call_name("d.Create(&h)"), "d.Create");
  EXPECT_EQ(call_name("api->launch (k, args)"), "api->launch");
  EXPECT_EQ(call_name("::cudaFree(p)"), "::cudaFree");
  EXPECT_EQ(call_name("cudnnCreate"), "cudnnCreate");
}

TEST(LibraryErrors, ADescriptionComesBackWhole) {
  EXPECT_EQ(call_name("a loop unrolled fewer than once"), "a loop unrolled fewer than once");
  EXPECT_EQ(call_name("a graph (of loops) refused"), "a graph (of loops) refused");
  EXPECT_EQ(call_name("(void)f(x)"), "(void)f(x)");
  EXPECT_EQ(call_name(""), "");
}

TEST(LibraryErrors, OneFormatForEveryLibrary) {
  EXPECT_EQ(library_error("cudaGraphAddMemcpyNode1D(&node, g, nullptr, 0, d, s, 4, k)",
                          "cudaErrorInvalidValue", "invalid argument"),
            "cudaGraphAddMemcpyNode1D failed: cudaErrorInvalidValue: invalid argument");
  EXPECT_EQ(library_error("cublasLtMatmul(h, op, ...)", "CUBLAS_STATUS_NOT_SUPPORTED",
                          "the functionality requested is not supported"),
            "cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED: the functionality requested is "
            "not supported");
  EXPECT_EQ(library_error("cudnnCreate", {}, "CUDNN_STATUS_NOT_INITIALIZED"),
            "cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED");
}

}  // namespace
}  // namespace tide::cuda
