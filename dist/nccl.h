// The NCCL backend: a group of one GPU per rank, for data-parallel training on GPUs. The
// ranks are those of the MPI world group (dist/mpi.h): NCCL's id travels over MPI, so
// `mpirun -n N` launches both. A build without MPI can still make a 1-rank group (for
// checks on a one-GPU machine). libnccl.so.2 (it comes with the CUDA toolkit) is loaded on
// first use; a build without CUDA or without nccl.h has no NCCL backend and says so.
//
// The group's collectives run on a CUDA stream of its GPU: its worker exchanges the
// agreement on the host over MPI, then enqueues ncclAllReduce / ncclBroadcast on that stream
// and moves on (the GPU runs the collective). Average is NCCL's ncclAvg.
#pragma once

#include "dist/process_group.h"

namespace tide::dist {

// True when this build of tide has the NCCL backend (CUDA and nccl.h at build time). Does
// not load NCCL or look for a GPU.
bool nccl_available();

// The group of every rank of this MPI job, each on its own GPU: cuda:`device`, or with
// device = -1 the local rank modulo the GPUs this machine has (the launcher's
// OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID; 0 without one). Made on the
// first call (every rank must call it: ncclCommInitRank waits for all); later calls return
// the same group and ignore `device`. Throws "[dist] tide was built without NCCL ..." in a
// build without it, "[dist] cannot load NCCL ..." when libnccl.so.2 is missing, "[dist]
// NCCL needs a real GPU ..." for a fake device, "[dist] ... ncclCommInitRank failed ..."
// when NCCL cannot set up, and what mpi_world() throws when MPI is needed and missing
// (more than one rank under mpirun in a build without MPI).
ProcessGroup& nccl_world(int device = -1);

}  // namespace tide::dist
