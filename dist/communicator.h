// Communicator: the calls of one collective backend (MPI on the CPU, NCCL on a GPU), as the
// communication stream's worker makes them. Sees raw buffers of one dtype, never tensors:
// ProcessGroup (dist/process_group.h) does the checks, the queueing and the messages.
// Not thread-safe by itself: ProcessGroup makes one call at a time.
#pragma once

#include <cstdint>
#include <span>

#include "core/device.h"
#include "core/dtype.h"

namespace tide::dist {

// How all_reduce combines the ranks' values. average is the sum divided by the group's size
// (floating dtypes only), as gradient averaging in data-parallel training needs.
enum class ReduceOp : uint8_t { sum, average };
constexpr const char* name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "average"; }

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The backend's name for messages ("mpi", "nccl").
  virtual const char* backend() const = 0;
  // Where the buffers of all_reduce and broadcast live: the CPU for MPI, the GPU an NCCL
  // communicator was made for. The group's communication stream is on this device.
  virtual Device device() const { return Device::cpu(); }

  // Each call throws tide::Error("[op] <call> failed: <backend's message>") when the backend
  // reports an error. A CPU backend blocks until every rank took part; a GPU backend
  // enqueues the data calls on `stream` (the cudaStream_t of the task's KernelContext) and
  // returns; its all_gather and barrier still block on the host.
  // Element-wise reduction over all ranks, in place over `count` elements at `data`
  // (average: floating dtypes only, the sum divided by size()).
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp red, void* stream,
                          const char* op) = 0;
  // Copies rank root's `count` elements at `data` over every other rank's.
  virtual void broadcast(void* data, int64_t count, DType dtype, int root, void* stream,
                         const char* op) = 0;
  virtual void barrier(const char* op) = 0;
  // Host memory: out[r * in.size() + i] = rank r's in[i]; out.size() == in.size() * size().
  virtual void all_gather(std::span<const int64_t> in, std::span<int64_t> out, const char* op) = 0;
  // Throws tide::Error("[op] ...") when the backend reported an asynchronous error (a GPU
  // backend's kernels failed or a peer is gone): the backend then aborts the communicator
  // instead of leaving the other ranks' kernels waiting, and every later call throws too.
  // Called before each collective's agreement; does not block. None for a CPU backend.
  virtual void check_health(const char* op) { (void)op; }
};

}  // namespace tide::dist
