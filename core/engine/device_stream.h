// The device side of a stream (docs/architecture.md, CUDA): how its worker runs a task, and what
// *complete* means on that device. The engine's queue, hazard tracking, backpressure and reclaim
// sit above this and are the same for every device (docs/architecture.md, Engine).
//   CPU  (CpuStream, core/engine/stream_worker.cpp): the worker runs the payload; a task is
//        complete when it returned.
//   CUDA (cuda::CudaStream, core/cuda/cuda_stream.h): the worker launches the payload's
//        kernels on a cudaStream_t; a task is complete when the GPU wrote its number to the
//        stream's timeline.
#pragma once

#include <cstdint>
#include <memory>

#include "core/engine/engine.h"
#include "core/kernel_context.h"
#include "core/storage.h"

namespace tide {

class DeviceStream {
 public:
  explicit DeviceStream(StreamImpl& owner) : owner_(owner) {}
  virtual ~DeviceStream() = default;
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  // Throws tide::Error("[op] ...") when no more work can be queued here (a failed GPU).
  virtual void check_usable(const char* /*op*/) const {}
  // The context kernels of this stream receive.
  const KernelContext& context() const { return ctx_; }

  // Worker, before running a task: make it wait for `pos`, a position on another stream
  // that is not known complete. Default: block this thread until it is complete.
  virtual void wait_for(StreamPos pos);
  // Worker: runs (CPU) or launches (CUDA) t's payload. What it throws fails the op.
  virtual void run(Engine::Task& t) { t.invoke(t, ctx_); }
  // Calling thread, synchronous mode: runs t to completion before returning (CUDA:
  // launches, then synchronizes the stream), so a failure is the op's own.
  virtual void run_inline(Engine::Task& t) = 0;
  // Worker: the task numbered seq was run, skipped or cancelled. Publishes progress.
  virtual void retire(uint64_t seq) = 0;
  // Frontend, under the engine lock: a task queued on `waiter` will wait for seq here.
  virtual void will_be_waited(uint64_t /*seq*/, StreamImpl& /*waiter*/) {}
  // Any thread: blocks until task seq of this stream is complete (after spinning did not
  // see it). Never rethrows.
  virtual void block_until(uint64_t seq) = 0;
  // Reads the device's progress into the stream's completed counter and returns it
  // (only streams whose completion the device reports: see StreamImpl::polled).
  virtual uint64_t poll() { return 0; }
  // Called by the worker of a GPU stream (StreamImpl::polled) when it has nothing to do,
  // before it spins or sleeps.
  virtual void idle() {}

 protected:
  StreamImpl& owner_;
  KernelContext ctx_;
};

// The device side of a new stream on owner.device: the CPU's, or a GPU's (core/cuda/).
// Throws tide::Error("[stream] ...") when that device cannot be used in this process.
std::unique_ptr<DeviceStream> make_device_stream(StreamImpl& owner);
std::unique_ptr<DeviceStream> make_cpu_stream(StreamImpl& owner);

}  // namespace tide
