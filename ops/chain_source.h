// A fused chain (ops/fused_chain.h) as CUDA C++ source: one kernel whose steps are written
// out instead of interpreted, for NVRTC (ops/chain_compiler.h). What a chain does is baked
// into the text (its functors in order, where each operand lives, its repeats, which state
// stays in registers); what a replay may change is not (addresses, scalars, functor
// parameters, the element count and the iteration count are read from the uploaded program
// and the kernel's arguments). So every chain of one shape shares one compiled kernel.
//
// The kernel computes what the interpreter computes, in the same order with the same
// functors (ops/functors.h, included by the text) and the same flags (no FMA contraction:
// ops/chain_compiler.cpp), so its results are the same bits. It does not replace the
// interpreter: a chain the compiler refuses, or a device without NVRTC, still runs
// interpreted.
#pragma once

#include <span>
#include <string>

#include "core/dtype.h"
#include "ops/fused_chain.h"

namespace tide::kernels {

// The compiled kernel's name and signature:
//   extern "C" __global__ void tide_chain(const unsigned char* steps, long long n,
//                                         long long iterations, const void* count,
//                                         int count_dtype)
// with FusedChain's fields: steps (the uploaded program), n, iterations, count and
// int(count_dtype). Launch with kThreads (256) threads per block, any number of blocks
// (the kernel loops grid-stride).
inline constexpr const char* kChainKernelName = "tide_chain";

// The source of `steps` on elements of `dtype`. The steps' addresses decide only which
// state an iterated chain keeps in registers (chain::plan_carried); their values are read
// by the kernel. Throws tide::Error for an empty chain, a register index beyond
// kMaxChainRegisters or a step whose functor is not listed.
std::string chain_kernel_source(std::span<const ChainStep> steps, DType dtype);

}  // namespace tide::kernels
