// Memory probes: one snapshot of what the memory experiments watch — a device's allocator
// stats, the engine's queue and the process RSS (and, for a GPU, the device's own free and
// total memory as the driver reports them). Cheap; does not wait.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/engine/engine.h"

namespace tide {

struct MemorySnapshot {
  Device device;  // whose allocator `allocator` is
  AllocatorStats allocator;
  EngineStats engine;
  size_t rss_bytes = 0;  // resident set size from /proc/self/statm (0 if unavailable)
  // A GPU only (0 on the CPU): what cudaMemGetInfo reports, so memory tide does not own
  // (other processes, the CUDA context, cuBLAS) shows too.
  size_t device_free_bytes = 0, device_total_bytes = 0;
};

// Resident set size of this process in bytes, from /proc/self/statm; 0 if unreadable.
size_t process_rss_bytes();
// The snapshot of `device` (default: the CPU). Throws "[memory_snapshot]" for a GPU this
// process cannot use.
MemorySnapshot memory_snapshot(Device device = Device::cpu());

}  // namespace tide
