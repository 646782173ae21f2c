// The cuBLASLt loader (core/cuda/cublaslt.h): dlopen on first use, every function looked
// up once.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/cuda/cublaslt.h"
#include "core/error.h"

namespace tide::cuda::lt {

namespace {

template <class F>
void bind(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) throw Error("cuda", std::string("cuBLASLt has no ") + name + ": " + dlerror());
}

Api load() {
  void* lib = nullptr;
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (!lib)
    throw Error("cuda", std::string("cannot load cuBLASLt (libcublasLt.so.13): ") + dlerror() +
                            "; it comes with the CUDA toolkit, add its lib64 to LD_LIBRARY_PATH");
  Api a{};
  bind(lib, a.Create, "cublasLtCreate");
  bind(lib, a.Destroy, "cublasLtDestroy");
  bind(lib, a.GetStatusName, "cublasLtGetStatusName");
  bind(lib, a.GetStatusString, "cublasLtGetStatusString");
  bind(lib, a.Matmul, "cublasLtMatmul");
  bind(lib, a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(lib, a.MatmulDescInit_internal, "cublasLtMatmulDescInit_internal");
  bind(lib, a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
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
