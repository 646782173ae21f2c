#include "core/segment_source.h"

#include <utility>

namespace tide {

SegmentSource::SegmentSource(std::unique_ptr<BlockSource> inner) : inner_(std::move(inner)) {}

SegmentSource::~SegmentSource() {
  for (const auto& [base, seg] : segments_)
    inner_->release(reinterpret_cast<void*>(base), kSegment);
}

void* SegmentSource::allocate(size_t bytes) {
  if (bytes > kSmallMax) return inner_->allocate(bytes);
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mu_);
  if (current_) {
    Segment& s = segments_.at(current_);
    if (s.used + need <= kSegment) {
      void* p = reinterpret_cast<void*>(current_ + s.used);
      s.used += need;
      ++s.live;
      return p;
    }
  }
  void* base = inner_->allocate(kSegment);
  if (!base) return inner_->allocate(bytes);  // no room for a segment: a block of its own
  current_ = reinterpret_cast<uintptr_t>(base);
  segments_[current_] = Segment{need, 1};
  return base;
}

void SegmentSource::release(void* p, size_t bytes) {
  if (bytes > kSmallMax) return inner_->release(p, bytes);
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::unique_lock lock(mu_);
  auto it = segments_.upper_bound(a);  // the first segment after p
  if (it == segments_.begin() || a >= std::prev(it)->first + kSegment) {
    lock.unlock();
    return inner_->release(p, bytes);  // a small block that got no segment
  }
  --it;
  if (--it->second.live > 0) return;
  if (current_ == it->first) current_ = 0;
  void* base = reinterpret_cast<void*>(it->first);
  segments_.erase(it);
  inner_->release(base, kSegment);
}

size_t SegmentSource::segments() const {
  std::lock_guard lock(mu_);
  return segments_.size();
}

}  // namespace tide
