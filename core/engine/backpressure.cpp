#include "core/engine/backpressure.h"

#include <algorithm>

namespace tide {

size_t added_bytes(std::span<Storage* const> reads, std::span<Storage* const> writes) {
  size_t n = 0;
  auto count = [&](Storage* s, std::span<Storage* const> seen_before) {
    if (s->hazard.queued_refs) return;
    if (std::find(seen_before.begin(), seen_before.end(), s) != seen_before.end()) return;
    if (s->resident()) n += s->bytes();  // as Reclaimer::hold will count it
  };
  for (size_t i = 0; i < reads.size(); ++i) count(reads[i], reads.first(i));
  for (size_t i = 0; i < writes.size(); ++i) {
    if (std::find(reads.begin(), reads.end(), writes[i]) != reads.end()) continue;
    count(writes[i], writes.first(i));
  }
  return n;
}

bool over_bounds(const BackpressureBounds& b, uint64_t inflight_ops, size_t inflight_bytes,
                 size_t new_bytes) {
  if (inflight_ops == 0) return false;
  return (b.max_ops && inflight_ops >= b.max_ops) ||
         (b.max_bytes && inflight_bytes + new_bytes > b.max_bytes);
}

}  // namespace tide
