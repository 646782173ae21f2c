// Compiled fused chains (docs/traced.md, On a GPU): a chain's source (ops/chain_source.h) compiled
// by NVRTC, loaded on first use with dlopen like cuBLASLt, so every build links and a machine
// without the CUDA toolkit's NVRTC runs chains interpreted. Compiling needs no GPU: the CPU tests
// compile chains wherever NVRTC loads. Loading and launching the result is CUDA's
// (ops/cuda/fused.cu, through cuda_chain_kernel below).
//
// The compiled text includes ops/functors.h and core/cuda/await_grids.h, embedded at build
// time (chain_headers.cpp is generated from the headers), so it computes with the same
// functors as nvcc's kernels and begins as they do.
#pragma once

#include <string>

namespace tide::kernels {

struct CompiledChain {
  std::string cubin;  // the CUBIN for the asked architecture; empty on failure
  std::string error;  // why not: NVRTC missing, or its log; empty on success
  std::string ptx;    // the PTX it was made from, for inspection (tests read its arithmetic)
};

// Compiles `source` for compute capability `sm` (e.g. 90 for sm_90) into a CUBIN, every
// call: the cache is the caller's (cuda_chain_kernel keeps each loaded kernel, failures
// included, per (source, sm), so a retrace or a second chain of the same shape costs a
// lookup). Thread-safe. Does not touch a GPU; never throws for a failed compile (the error
// says why), throws std::bad_alloc only.
CompiledChain compile_chain(const std::string& source, int sm);

// NVRTC's version as "13.0", or "" with *why when it does not load.
std::string nvrtc_version(std::string* why = nullptr);

// Whether GPU traces compile their fused chains (true unless the environment sets
// TIDE_CUDA_NVRTC=0, read once); a trace prepared while false runs them interpreted.
// For comparisons and tests; does not change a trace already prepared.
bool compiled_chains_enabled();
void set_compiled_chains_enabled(bool on);

// Set when the CUDA kernels register (ops/cuda/fused.cu): the kernel of `source` for CUDA
// device `device` (a cudaKernel_t), compiled, loaded and cached; nullptr and *why when it
// cannot be (no NVRTC, a compile or load error). Does not wait for the device.
inline const void* (*cuda_chain_kernel)(const std::string& source, int device,
                                        std::string* why) = nullptr;

namespace detail {
// The headers the source includes, as text (generated: chain_headers.cpp.in).
extern const char* const kChainFunctorsHeader;
extern const char* const kChainHostDeviceHeader;
extern const char* const kChainFloat16Header;
extern const char* const kChainAwaitGridsHeader;
}  // namespace detail

}  // namespace tide::kernels
