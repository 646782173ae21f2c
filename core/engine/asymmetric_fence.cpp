#include "core/engine/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>

namespace tide::detail {
namespace {
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }
}  // namespace

bool enable_asymmetric_fence() {
  static std::once_flag once;
  std::call_once(once, [] {
    const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
        !(cmds & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED))
      return;
    // Registration makes the expedited command legal for this process (Linux >= 4.14).
    if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return;
    g_heavy_fence.store(true, std::memory_order_relaxed);
  });
  return g_heavy_fence.load(std::memory_order_relaxed);
}

void heavy_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g_heavy_fence.load(std::memory_order_relaxed)) {
    // Fails only for a process that is not registered (e.g. a child after a fork that did
    // not keep the registration): fall back to full fences on both sides from now on.
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
      g_heavy_fence.store(false, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

}  // namespace tide::detail
