#include "core/memory_probe.h"

#include <cstdio>
#include <unistd.h>

namespace tide {

size_t process_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

MemorySnapshot memory_snapshot() {
  MemorySnapshot m;
  m.allocator = Allocator::get().stats();
  m.engine = Engine::get().stats();
  m.rss_bytes = process_rss_bytes();
  return m;
}

}  // namespace tide
