// Memory probes: one snapshot of what the memory experiments watch — the allocator's
// stats, the engine's queue and the process RSS. Cheap; does not wait.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/engine.h"

namespace tide {

struct MemorySnapshot {
  AllocatorStats allocator;
  EngineStats engine;
  size_t rss_bytes = 0;  // resident set size from /proc/self/statm (0 if unavailable)
};

// Resident set size of this process in bytes, from /proc/self/statm; 0 if unreadable.
size_t process_rss_bytes();
MemorySnapshot memory_snapshot();

}  // namespace tide
