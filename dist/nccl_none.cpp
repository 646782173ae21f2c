// The NCCL backend's stand-in for builds without CUDA or without nccl.h: says so at run
// time, so every build configuration links (docs/contributing.md, Backends).
#include "core/error.h"
#include "dist/nccl.h"

namespace tide::dist {

bool nccl_available() { return false; }

ProcessGroup& nccl_world(int) {
  throw Error("dist",
              "tide was built without NCCL: it needs a CUDA build (TIDE_CUDA=AUTO|ON with nvcc) "
              "and NCCL's nccl.h, which the CUDA toolkit installs; use dist::mpi_world() for "
              "CPU tensors");
}

}  // namespace tide::dist
