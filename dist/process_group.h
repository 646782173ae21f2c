// ProcessGroup: the ranks of a data-parallel job and the collectives between them. Each
// collective is queued as an engine task on the group's communication stream (no wait for
// the caller; hazard tracking orders it); ranks that disagree on a collective fail on every
// rank instead of hanging. Design: docs/data-parallel.md. Not done here: autograd.
#pragma once

#include <memory>

#include "core/engine/engine.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace tide::dist {

class ProcessGroup {
 public:
  // A group over `comm`'s ranks, with a new communication stream on comm's device (and its
  // worker thread). Does not wait. Use mpi_world() (dist/mpi.h) for the MPI world group,
  // nccl_world() (dist/nccl.h) for its GPUs.
  explicit ProcessGroup(std::unique_ptr<Communicator> comm);
  // Waits for the collectives queued on this group (Stream::synchronize); does not rethrow.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  const char* backend() const { return comm_->backend(); }
  // Where this group's collectives run and its tensors must live.
  Device device() const { return comm_->device(); }
  // The communication stream every collective of this group is queued on.
  Stream stream() const { return stream_; }
  // The backend itself, for backends that build on this group (NCCL exchanges its id and
  // the agreement over the MPI group's). Its calls bypass the stream and block.
  Communicator& communicator() const { return *comm_; }

  // Queues an in-place all-reduce of t over the group: afterwards every rank's t holds the
  // element-wise sum of all ranks' t (average: the sum divided by size(), floating dtypes
  // only). Does not wait. Throws "[all_reduce]" at the call for an undefined tensor, a
  // tensor not on device(), average of an integer tensor, or a tensor that requires grad
  // while grad mode is on. A failure while it runs (ranks that disagree, a backend error)
  // is stored in t and rethrown by the first sync that reads it, with the backend's
  // message, t's shape and dtype and this rank.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum, Site site = Site::current());
  // Queues an in-place broadcast: afterwards every rank's t holds rank root's t. Does not
  // wait. Throws "[broadcast]" at the call like all_reduce (any dtype is accepted), and for
  // a root outside [0, size()). Failures while it runs are stored in t, as for all_reduce.
  void broadcast(const Tensor& t, int root = 0, Site site = Site::current());
  // Waits until every rank has reached its barrier, after this group's collectives queued
  // before it (not after other streams' work: sync tensors for that). Throws "[barrier]"
  // when the backend fails or the ranks disagree (another rank is in another collective),
  // and inside a trace (it waits on the host).
  void barrier(Site site = Site::current());

 private:
  std::unique_ptr<Communicator> comm_;
  Stream stream_;
  // Read and written by every collective recorded in a trace: orders them (process_group.cpp).
  Tensor order_;
};

}  // namespace tide::dist
