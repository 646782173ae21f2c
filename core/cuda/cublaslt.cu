// The cuBLASLt loader (core/cuda/cublaslt.h): dlopen on first use, every function looked
// up once.
#include "core/cuda/cublaslt.h"
#include "core/shared_library.h"

namespace tide::cuda::lt {

namespace {

template <class F>
void bind(void* lib, F& f, const char* name) {
  tide::detail::bind_symbol(lib, f, name, "cuBLASLt", "cuda");
}

Api load() {
  void* lib = tide::detail::load_library(
      {"libcublasLt.so.13", "libcublasLt.so"}, "cuBLASLt", "cuda",
      "it comes with the CUDA toolkit, add its lib64 to LD_LIBRARY_PATH");
  Api a{};
  bind(lib, a.Create, "cublasLtCreate");
  bind(lib, a.Destroy, "cublasLtDestroy");
  bind(lib, a.GetStatusName, "cublasLtGetStatusName");
  bind(lib, a.GetStatusString, "cublasLtGetStatusString");
  bind(lib, a.Matmul, "cublasLtMatmul");
  bind(lib, a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(lib, a.MatmulDescInit_internal, "cublasLtMatmulDescInit_internal");
  bind(lib, a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(lib, a.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  bind(lib, a.MatmulPreferenceInit_internal, "cublasLtMatmulPreferenceInit_internal");
  bind(lib, a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(lib, a.MatrixLayoutInit_internal, "cublasLtMatrixLayoutInit_internal");
  return a;  // the library stays loaded for the process
}

}  // namespace

const Api& api() {
  static const Api a = load();  // a failed load throws and is retried on the next call
  return a;
}

}  // namespace tide::cuda::lt
