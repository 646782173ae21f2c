#include "core/engine/reclaim.h"

#include "core/engine/engine_impl.h"

namespace tide {

size_t Reclaimer::reclaim(std::deque<StreamImpl>& streams, std::vector<Segment*>& free_segments) {
  submits_since_ = 0;
  bytes_since_ = 0;
  size_t n = 0;
  for (StreamImpl& s : streams) {
    uint64_t done = s.done();
    while (s.reclaimed < done) {
      uint64_t seq = ++s.reclaimed;
      if (seq - 1 - s.reclaim_seg->base == Segment::kSize) {
        // The worker finished seq, so it has moved past the old segment.
        Segment* old = s.reclaim_seg;
        s.reclaim_seg = old->next.load(std::memory_order_acquire);
        free_segments.push_back(old);
      }
      Engine::Task& t = s.reclaim_seg->slots[seq - 1 - s.reclaim_seg->base];
      t.destroy(t);
      int k = t.num_reads + t.num_writes;
      for (int i = 0; i < k; ++i) {
        Storage* st = t.storages[i];
        if (--st->hazard.queued_refs == 0) {
          add_inflight(-int64_t(st->hazard.queued_bytes));
          st->release();  // the queue's one reference (hold)
        }
      }
      ++n;
    }
  }
  return n;
}

}  // namespace tide
