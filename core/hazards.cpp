#include "core/hazards.h"

#include <algorithm>

#include "core/engine_impl.h"

namespace tide {

void add_wait(Engine::Task& t, StreamPos pos, const StreamImpl* self, WaitOverflow overflow,
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

void collect_hazards(Engine::Task& t, std::span<Storage* const> reads,
                     std::span<Storage* const> writes, const StreamImpl* self,
                     WaitOverflow overflow, void* ctx) {
  for (Storage* s : reads) add_wait(t, s->hazard.last_write, self, overflow, ctx);
  for (Storage* s : writes) {
    add_wait(t, s->hazard.last_write, self, overflow, ctx);
    for (int i = 0; i < s->hazard.num_readers; ++i)
      add_wait(t, s->hazard.readers[i], self, overflow, ctx);
  }
}

void record_access(Engine::Task& t, std::span<Storage* const> reads,
                   std::span<Storage* const> writes, StreamPos me, WaitOverflow overflow,
                   void* ctx) {
  for (Storage* s : reads) {
    // Written too (in place): the write below makes this task the last writer and clears
    // the readers, so registering the read could only block on a full reader list.
    if (std::find(writes.begin(), writes.end(), s) != writes.end()) continue;
    HazardState& h = s->hazard;
    bool found = false;
    for (int i = 0; i < h.num_readers; ++i)
      if (h.readers[i].stream == me.stream) {
        h.readers[i].seq = me.seq;
        found = true;
      }
    if (found) continue;
    if (h.num_readers == HazardState::kInlineReaders) {  // drop finished readers
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
