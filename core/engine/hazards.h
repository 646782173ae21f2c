// Hazard tracking (docs/architecture.md, Engine): from the storages a task reads and writes, the
// positions on other streams it must wait for (read-after-write, write-after-read,
// write-after-write), and the per-storage bookkeeping once it is queued. Within one stream FIFO
// order already orders everything, so positions on the task's own stream are never waits. Callers
// hold the engine's frontend lock; nothing here sleeps but the `overflow` callback (the engine's
// collects the positions and waits for them after releasing the lock).
#pragma once

#include <algorithm>
#include <span>

#include "core/engine/engine_impl.h"
#include "core/storage.h"

namespace tide {

// Called with a position that must be waited for but does not fit in the task's waits.
using WaitOverflow = void (*)(void* ctx, StreamPos pos);

// Inline: these run on every submit (the enqueue path).

// Adds pos to t's waits unless it is on `self`, already complete, or covered by a wait on
// the same stream (which then waits for the later of the two). Calls overflow(ctx, pos)
// when all Task::kMaxWaits slots are taken by other streams.
inline void add_wait(Engine::Task& t, StreamPos pos, const StreamImpl* self, WaitOverflow overflow,
                     void* ctx) {
  if (!pos.stream || pos.stream == self || pos.stream->is_complete(pos.seq)) return;
  for (int i = 0; i < t.num_waits; ++i)
    if (t.waits[i].stream == pos.stream) {
      t.waits[i].seq = std::max(t.waits[i].seq, pos.seq);
      return;
    }
  if (t.num_waits < Engine::Task::kMaxWaits) {
    t.waits[t.num_waits++] = pos;
    return;
  }
  overflow(ctx, pos);
}

// The waits of a task on `self`: the last write of every storage it reads or writes, and
// the reads since of every storage it writes.
inline void collect_hazards(Engine::Task& t, std::span<Storage* const> reads,
                            std::span<Storage* const> writes, const StreamImpl* self,
                            WaitOverflow overflow, void* ctx) {
  for (Storage* s : reads) add_wait(t, s->hazard.last_write, self, overflow, ctx);
  for (Storage* s : writes) {
    add_wait(t, s->hazard.last_write, self, overflow, ctx);
    for (int i = 0; i < s->hazard.num_readers; ++i)
      add_wait(t, s->hazard.readers[i], self, overflow, ctx);
  }
}

// The wait record_access will add when a storage t reads has a full reader list of
// unfinished readers (the takeover below), added now so that a caller can see whether all
// of t's waits fit before it changes any state. Drops finished readers (as record_access
// would), which changes nothing else.
inline void add_takeover_waits(Engine::Task& t, std::span<Storage* const> reads,
                               std::span<Storage* const> writes, const StreamImpl* self,
                               WaitOverflow overflow, void* ctx) {
  for (Storage* s : reads) {
    HazardState& h = s->hazard;
    if (h.num_readers < HazardState::kInlineReaders) continue;  // the common case, first
    if (std::find(writes.begin(), writes.end(), s) != writes.end()) continue;
    bool mine = false;
    for (int i = 0; i < h.num_readers; ++i) mine |= h.readers[i].stream == self;
    if (mine) continue;
    int k = 0;
    for (int i = 0; i < h.num_readers; ++i)
      if (!h.readers[i].stream->is_complete(h.readers[i].seq)) h.readers[k++] = h.readers[i];
    h.num_readers = k;
    if (k == HazardState::kInlineReaders) add_wait(t, h.readers[0], self, overflow, ctx);
  }
}

// Makes the task at `me` the last writer of `writes` and a reader of `reads`. A storage
// read by HazardState::kInlineReaders streams still running when another reads it: the
// task takes over the oldest reader's entry by waiting for it too, so that later writers,
// who wait for the task, stay ordered after both.
inline void record_access(Engine::Task& t, std::span<Storage* const> reads,
                          std::span<Storage* const> writes, StreamPos me, WaitOverflow overflow,
                          void* ctx) {
  for (Storage* s : reads) {
    HazardState& h = s->hazard;
    bool found = false;
    for (int i = 0; i < h.num_readers; ++i)
      if (h.readers[i].stream == me.stream) {
        h.readers[i].seq = me.seq;
        found = true;
      }
    if (found) continue;
    if (h.num_readers == HazardState::kInlineReaders) {
      // Written too (in place): the write below makes this task the last writer and clears
      // the readers, so taking over an entry could only add a needless wait. (Below a full
      // list, registering such a read is harmless: the write clears it.)
      if (std::find(writes.begin(), writes.end(), s) != writes.end()) continue;
      // Drop finished readers.
      int k = 0;
      for (int i = 0; i < h.num_readers; ++i)
        if (!h.readers[i].stream->is_complete(h.readers[i].seq)) h.readers[k++] = h.readers[i];
      h.num_readers = k;
      if (k == HazardState::kInlineReaders) {
        add_wait(t, h.readers[0], me.stream, overflow, ctx);
        std::copy(h.readers + 1, h.readers + k, h.readers);
        h.num_readers = k - 1;
      }
    }
    h.readers[h.num_readers++] = me;
  }
  for (Storage* s : writes) {
    s->hazard.last_write = me;
    s->hazard.num_readers = 0;
  }
}

}  // namespace tide
