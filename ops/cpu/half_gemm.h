// The CPU's GEMM entries over bfloat16 and float16 (ops/linalg_kernels.h: Gemm, GemmBatch,
// GemmBias): float32 accumulation, each result rounded once to the 16-bit type (after the bias
// and ReLU; GELU then runs on that rounded value, as the gelu op would). bfloat16 runs oneDNN's
// matmul when the build has it (TIDE_BF16_GEMM, cmake/Blas.cmake) and oneDNN has one for the CPU
// (AMX or AVX512_BF16 kernels where the CPU has them; none without AVX-512). Otherwise, and for
// float16 always, the operands are widened to float32 and the
// float32 GEMM runs: the same bits as the float32 op between casts. Deterministic either way (a
// fixed thread count). Called by the entries in ops/cpu/linalg.cpp; errors are thrown as
// std::runtime_error.
#pragma once

#include <string>

#include "core/float16.h"
#include "ops/linalg_kernels.h"

namespace tide::kernels::cpu {

template <class H>
void half_gemm(const Gemm<H>& g);
template <class H>
void half_gemm_batched(const Gemm<H>& g, const GemmBatch& bt);
template <class H>
void half_gemm_bias(const GemmBias<H>& gb);

// Which code runs the CPU's bfloat16 GEMMs: "oneDNN 2.6.3 (matmul)", or "the float32 GEMM"
// followed, when oneDNN is built in but has no bfloat16 matmul for this CPU, by why.
std::string bf16_gemm_library();

}  // namespace tide::kernels::cpu
