// Hazard tracking (DESIGN §3): from the storages a task reads and writes, the positions on
// other streams it must wait for (read-after-write, write-after-read, write-after-write),
// and the per-storage bookkeeping once it is queued. Within one stream FIFO order already
// orders everything, so positions on the task's own stream are never waits. Callers hold
// the engine's frontend lock; nothing here sleeps but the `overflow` callback.
#pragma once

#include <span>

#include "core/engine.h"
#include "core/storage.h"

namespace tide {

// Called with a position that must be waited for but does not fit in the task's waits.
using WaitOverflow = void (*)(void* ctx, StreamPos pos);

// Adds pos to t's waits unless it is on `self`, already complete, or covered by a wait on
// the same stream (which then waits for the later of the two). Calls overflow(ctx, pos)
// when all Task::kMaxWaits slots are taken by other streams.
void add_wait(Engine::Task& t, StreamPos pos, const StreamImpl* self, WaitOverflow overflow,
              void* ctx);

// The waits of a task on `self`: the last write of every storage it reads or writes, and
// the reads since of every storage it writes.
void collect_hazards(Engine::Task& t, std::span<Storage* const> reads,
                     std::span<Storage* const> writes, const StreamImpl* self,
                     WaitOverflow overflow, void* ctx);

// Makes the task at `me` the last writer of `writes` and a reader of `reads`. A storage
// read by HazardState::kInlineReaders streams still running when another reads it: the
// task takes over the oldest reader's entry by waiting for it too, so that later writers,
// who wait for the task, stay ordered after both.
void record_access(Engine::Task& t, std::span<Storage* const> reads,
                   std::span<Storage* const> writes, StreamPos me, WaitOverflow overflow,
                   void* ctx);

}  // namespace tide
