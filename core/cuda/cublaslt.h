// cuBLASLt, loaded on first use (dlopen) instead of linked: the library is hundreds of MB
// and its load and static initialisation cost every tide process ~0.1-0.25 s at start
// even when it never touches a GPU. Include this instead of <cublasLt.h>: the calls tide
// makes (below) are redirected to the loaded library. nvcc-compiled files only.
#pragma once

#include <cublasLt.h>

namespace tide::cuda::lt {

struct Api {
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtDestroy) Destroy;
  decltype(&::cublasLtGetStatusName) GetStatusName;
  decltype(&::cublasLtGetStatusString) GetStatusString;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescInit_internal) MatmulDescInit_internal;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceInit_internal) MatmulPreferenceInit_internal;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutInit_internal) MatrixLayoutInit_internal;
  decltype(&::cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

// The loaded library's functions. The first call loads it (libcublasLt.so.13, else
// libcublasLt.so); throws tide::Error("[cuda] ...") naming dlerror() when it cannot.
const Api& api();

}  // namespace tide::cuda::lt

#define cublasLtCreate(...) ::tide::cuda::lt::api().Create(__VA_ARGS__)
#define cublasLtDestroy(...) ::tide::cuda::lt::api().Destroy(__VA_ARGS__)
#define cublasLtGetStatusName(...) ::tide::cuda::lt::api().GetStatusName(__VA_ARGS__)
#define cublasLtGetStatusString(...) ::tide::cuda::lt::api().GetStatusString(__VA_ARGS__)
#define cublasLtMatmul(...) ::tide::cuda::lt::api().Matmul(__VA_ARGS__)
#define cublasLtMatmulAlgoGetHeuristic(...) \
  ::tide::cuda::lt::api().MatmulAlgoGetHeuristic(__VA_ARGS__)
#define cublasLtMatmulDescSetAttribute(...) \
  ::tide::cuda::lt::api().MatmulDescSetAttribute(__VA_ARGS__)
#define cublasLtMatmulPreferenceSetAttribute(...) \
  ::tide::cuda::lt::api().MatmulPreferenceSetAttribute(__VA_ARGS__)
#define cublasLtMatrixLayoutSetAttribute(...) \
  ::tide::cuda::lt::api().MatrixLayoutSetAttribute(__VA_ARGS__)
// The header's inline Init helpers call the *_internal symbols directly: replaced too.
#define cublasLtMatmulDescInit(desc, ...) \
  ::tide::cuda::lt::api().MatmulDescInit_internal(desc, sizeof(*(desc)), __VA_ARGS__)
#define cublasLtMatmulPreferenceInit(pref) \
  ::tide::cuda::lt::api().MatmulPreferenceInit_internal(pref, sizeof(*(pref)))
#define cublasLtMatrixLayoutInit(layout, ...) \
  ::tide::cuda::lt::api().MatrixLayoutInit_internal(layout, sizeof(*(layout)), __VA_ARGS__)
