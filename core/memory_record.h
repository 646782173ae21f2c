// Memory recording (docs/memory.md, "The memory report"): while on, every block the
// allocators hand out is recorded with its op, the user's enqueue site (file:line, the one
// errors name), its stream and its role, and every take, free, re-tag and return to the
// system is an event on a timeline. Off (the default), the hooks cost one relaxed load and
// a branch, and nothing is allocated. Blocks taken before start() are not recorded; their
// bytes show as "untracked" in a snapshot.
//
// Roles: a block's role is what it is for. Outputs start as `temporary` (or the role of the
// thread's RoleScope); the layers that know more re-tag them: nn::Module's parameters and
// buffers, autograd's leaf gradients and, at each recorded op, the blocks the thread took
// since the previous one (activations; never under NoGrad), an optimizer's state, kernel
// workspaces, a trace's arena. Not done here: the call stack of an allocation (the
// enqueue site is one frame).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"

namespace tide {

class Storage;
class Tensor;

namespace memory {

enum class Role : uint8_t {
  parameter,  // a module's parameters and buffers (batch norm's running statistics)
  gradient,
  optimizer_state,
  activation,   // taken while autograd recorded the forward pass: an op's outputs, what it
                // keeps beside them for backward, the batch it ran on
  temporary,    // every other op output
  workspace,    // a kernel's scratch memory while it runs
  trace_arena,  // a traced step's planned intermediates (and a GPU graph's fixed blocks)
};
inline constexpr int kNumRoles = 7;
std::string_view name(Role r);

// What happened to a block (or, for `mark`, to the run).
enum class EventKind : uint8_t {
  take,      // a block was handed out (with its role)
  free,      // it went back to the allocator's cache
  retag,     // its role changed (from -> role)
  site,      // its op was queued: `site` names the op and the enqueue site
  returned,  // cached bytes went back to the system (block 0, bytes)
  mark,      // a label on the timeline (the trainer's sync points): `site` indexes marks
};

inline constexpr uint32_t kNoSite = UINT32_MAX;

struct Event {
  int64_t t_ns = 0;  // since start()
  uint64_t block = 0;
  uint64_t bytes = 0;         // the block's (a size class: what the allocator counts)
  uint64_t queued_bytes = 0;  // bytes held by queued work (all devices): take, free, site, mark
  uint64_t cached_bytes = 0;  // the block's allocator's cached bytes after it happened
  // take and site: index into Snapshot::sites (kNoSite: none known); mark: into marks.
  uint32_t site = kNoSite;
  EventKind kind = EventKind::take;
  Role role = Role::temporary;
  Role from = Role::temporary;  // retag only
  int8_t device = -1;           // -1 the CPU, else the GPU's index
};

// Where a block's op was queued.
struct Site {
  std::string op;    // the op's name ("matmul"), or the allocating call's when never queued
  std::string file;  // the user's source file, as errors name it ("" when unknown)
  uint32_t line = 0;
  int stream = -1;  // the engine's stream id (-1: never queued)
};

// A block alive at snapshot().
struct Block {
  uint64_t id = 0;
  Device device;
  size_t bytes = 0;      // the block (its size class)
  size_t requested = 0;  // what was asked for
  Role role = Role::temporary;
  bool queued = false;  // queued work holds it (its op, or a later one, has not run yet)
  int64_t t_ns = 0;     // when it was taken
  int site = -1;        // index into Snapshot::sites, -1 before its op was queued
};

struct Snapshot {
  std::vector<Block> blocks;  // every recorded live block, oldest first
  std::vector<Event> events;  // the timeline since start(), in order
  std::vector<Site> sites;
  std::vector<std::string> marks;
  uint64_t dropped_events = 0;  // events past RecordOptions::max_events, not kept
  // Per device (index 0 the CPU, 1 + i GPU i): active bytes the allocator counts that no
  // recorded block explains (taken before start()).
  std::vector<size_t> untracked_bytes;
};

struct RecordOptions {
  size_t max_events = size_t(1) << 21;  // ~100 MB of events; later ones are counted, not kept
};

// Starts recording (clearing what an earlier recording kept). Does not wait.
void start(RecordOptions options = {});
// Stops recording; what was recorded stays for snapshot() until the next start().
void stop();
bool recording();
// The live blocks (with whether queued work holds them) and the timeline so far. Takes the
// engine's lock briefly; does not wait for queued work. Works after stop() too (the live
// blocks are then those alive at stop()).
Snapshot snapshot();

// Sets the role of t's storage (of a block taken before start(): records it now, with its
// role and no site). `activation` replaces only `temporary`; the other roles replace any.
// No-op when not recording or t is undefined.
void tag(const Tensor& t, Role role);
// A label on the timeline (the trainer marks each minibatch's sync). No-op when off.
void mark(std::string label);

// The role of the blocks the calling thread takes in this scope (instead of temporary).
class RoleScope {
 public:
  explicit RoleScope(Role r);
  ~RoleScope();
  RoleScope(const RoleScope&) = delete;
  RoleScope& operator=(const RoleScope&) = delete;

 private:
  Role prev_;
};

namespace detail {
inline std::atomic<bool> g_recording{false};
inline bool on() { return g_recording.load(std::memory_order_relaxed); }
// Hooks, called only when on(): the allocator's takes, frees and returns; the engine's
// submits (the written storages' op, site and stream; under its lock); autograd's recorded
// ops (the blocks this thread took since the last one become activations, if alive).
void on_take(const Storage* s, size_t requested, const char* op, bool workspace);
void on_free(const Storage* s);
void on_returned(Device d, size_t bytes);
void on_submit(const Storage* const* writes, size_t n, const char* op, const char* file,
               uint32_t line, int stream);
void on_recorded_op();
// Forgets the blocks this thread took since the last recorded op (autograd's NoGrad: what
// is taken without recording is not kept for backward).
void forget_taken();
void tag_storage(const Storage* s, Role role);
// The storage a deferred storage took its block into (so a site noted for the deferred
// storage at submit moves to the block).
void on_materialized(const Storage* deferred, const Storage* block);
// A deferred storage made on this thread (allocation at execution): its block will take the
// role this thread's RoleScope gives, or activation if an op is recorded before the next
// one; on_deferred_gone when it is released (with or without a block).
void on_deferred(const Storage* s);
void on_deferred_gone(const Storage* s);
}  // namespace detail

}  // namespace memory
}  // namespace tide
