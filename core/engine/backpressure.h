// Backpressure (docs/architecture.md, Engine): bounds on the work queued ahead of the workers. A
// submit that would pass a bound blocks (in Engine::begin_task) until the workers catch up; these
// are the rules it applies. Callers hold the engine lock; nothing here blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/storage.h"

namespace tide {

struct BackpressureBounds {
  uint64_t max_ops = 0;  // tasks queued and not complete; 0 = no bound
  size_t max_bytes = 0;  // bytes held by queued work; 0 = no bound
  bool any() const { return max_ops || max_bytes; }
};

// Bytes a task would add to the bytes held by queued work: its storages that no queued
// task holds yet (each counted once).
size_t added_bytes(std::span<Storage* const> reads, std::span<Storage* const> writes);

// True when one more task adding `new_bytes` would pass a bound. Never with nothing in
// flight, so a single task bigger than the byte bound runs alone instead of blocking.
bool over_bounds(const BackpressureBounds& b, uint64_t inflight_ops, size_t inflight_bytes,
                 size_t new_bytes);

}  // namespace tide
