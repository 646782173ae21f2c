// The MPI backend of a build without MPI: the same entry points, each saying plainly what
// is missing (docs/contributing.md, Backends: every configuration links, a missing backend fails at
// run time).
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "dist/mpi.h"

namespace tide::dist {

bool mpi_available() { return false; }

ProcessGroup& mpi_world(int*, char***) {
  std::string launched = launched_by_mpirun();
  if (!launched.empty())
    launched =
        "; this process was started by mpirun (" + launched + "), so every rank would run alone";
  throw Error("dist",
              "tide was built without MPI: install it (Debian: apt-get install "
              "libopenmpi-dev openmpi-bin) and configure again with -DTIDE_MPI=ON" +
                  launched);
}

}  // namespace tide::dist
