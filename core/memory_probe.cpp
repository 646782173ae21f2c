#include "core/memory_probe.h"

#include <unistd.h>

#include <cstdio>

#include "core/cuda/runtime.h"

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

MemorySnapshot memory_snapshot(Device device) {
  MemorySnapshot m;
  m.device = device;
  if (device.is_cuda()) {
    cuda::DeviceRuntime& rt = cuda::DeviceRuntime::get(device.index, "memory_snapshot");
    cuda::MemInfo info = rt.api().mem_info();
    m.device_free_bytes = info.free;
    m.device_total_bytes = info.total;
  }
  m.allocator = Allocator::get(device).stats();
  m.engine = Engine::get().stats();
  m.rss_bytes = process_rss_bytes();
  return m;
}

}  // namespace tide
