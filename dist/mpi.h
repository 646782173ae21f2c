// The MPI backend: the world group of the processes `mpirun -n N` started, over OpenMPI (or
// any MPI). Built when CMake found MPI (TIDE_MPI=AUTO|ON); otherwise every call but
// mpi_available() throws "[dist] tide was built without MPI: ...".
// MPI is initialised with MPI_THREAD_SERIALIZED (the calls come from a communication
// stream's worker, one at a time) and finalised at exit, after the world group's queued
// collectives ran. Errors come back as tide::Error (MPI_ERRORS_RETURN), never an abort.
#pragma once

#include <string>

#include "dist/process_group.h"

namespace tide::dist {

// True when this build of tide has the MPI backend. Does not initialise anything.
bool mpi_available();

// The launcher variable that says this process was started by mpirun ("OMPI_COMM_WORLD_SIZE=2",
// or MPICH's PMI_SIZE, or PMIx's PMIX_RANK), or "" when it was not. Reads the environment only.
std::string launched_by_mpirun();

// The group of every rank of this MPI job (a duplicate of MPI_COMM_WORLD), initialising
// MPI on the first call (argc/argv may be null; MPI may read and edit them). Later calls
// return the same group. Does not wait for other ranks beyond what MPI_Init_thread does.
// Throws "[dist] tide was built without MPI: ..." in a build without MPI (naming the mpirun
// that started this process, if one did), and "[dist] MPI_Init_thread failed ..." or
// "[dist] MPI offers only thread level ..." when MPI cannot be used from a worker thread.
ProcessGroup& mpi_world(int* argc = nullptr, char*** argv = nullptr);

}  // namespace tide::dist
