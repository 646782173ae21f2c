#include "trace/backend.h"

#include "trace/cpu/backend.h"
#include "trace/cuda/backend.h"

namespace tide::trace {

const Backend& backend_for(Device d) {
  static const CpuBackend cpu;
  static const CudaBackend gpu;
  if (d.is_cpu()) return cpu;
  return gpu;
}

}  // namespace tide::trace
