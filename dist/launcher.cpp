// Whether mpirun started this process: what the data-parallel commands read to decide to
// join the MPI world group, in every build (dist/mpi.h).
#include <cstdlib>
#include <string>

#include "dist/mpi.h"

namespace tide::dist {

std::string launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* v = std::getenv(var)) return std::string(var) + "=" + v;
  return {};
}

}  // namespace tide::dist
