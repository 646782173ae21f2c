// The memory recorder behind core/memory_record.h: one mutex-guarded table of live blocks
// and one event vector. Lock order: the engine's lock, then this one (on_submit runs under
// the engine's lock; snapshot() takes the engine's first); nothing here calls into the engine
// or an allocator while holding it.
#include "core/memory_record.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/engine/reclaim.h"
#include "core/storage.h"
#include "core/tensor.h"

namespace tide::memory {

std::string_view name(Role r) {
  switch (r) {
    case Role::parameter: return "parameter";
    case Role::gradient: return "gradient";
    case Role::optimizer_state: return "optimizer state";
    case Role::activation: return "activation";
    case Role::temporary: return "temporary";
    case Role::workspace: return "workspace";
    case Role::trace_arena: return "trace arena";
  }
  return "?";
}

namespace {

thread_local Role tl_role = Role::temporary;
// Blocks this thread took since autograd last recorded an op: that op's outputs, and what it
// keeps for backward besides (a norm's statistics, attention's log-sum-exp). Bounded: a
// backward pass (no ops recorded) takes many.
struct Taken {
  const Storage* storage;
  uint64_t id;  // the storage may have been freed and taken again since: compare ids
};
thread_local std::vector<Taken> tl_since_recorded;
constexpr size_t kMaxSinceRecorded = 64;

struct Live {
  uint64_t id;
  size_t bytes, requested;
  Device device;
  Role role;
  int64_t t_ns;
  int site;
  const Storage* storage;
};

struct SiteKey {
  const char* op;
  const char* file;
  uint32_t line;
  int stream;
  bool operator==(const SiteKey&) const = default;
};
struct SiteKeyHash {
  size_t operator()(const SiteKey& k) const {
    size_t h = std::hash<const void*>()(k.op) * 31 + std::hash<const void*>()(k.file);
    return (h * 31 + k.line) * 31 + size_t(k.stream);
  }
};

struct Recorder {
  std::mutex mu;
  RecordOptions options;
  std::chrono::steady_clock::time_point t0;
  uint64_t next_id = 1;
  std::unordered_map<const Storage*, Live> live;
  std::unordered_map<const Storage*, int> pending_sites;  // deferred storages, by submit
  // Deferred storages (allocation at execution) made while recording, by id, and the role
  // each is to give its block when it takes one (a RoleScope's, a tag, activation).
  std::unordered_map<const Storage*, uint64_t> deferred;
  std::unordered_map<const Storage*, Role> pending_roles;
  std::vector<Event> events;
  uint64_t dropped = 0;
  std::unordered_map<SiteKey, int, SiteKeyHash> site_index;
  std::vector<Site> sites;
  std::vector<std::string> marks;

  int64_t now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0)
        .count();
  }
  void push(Event e) {
    if (events.size() >= options.max_events) {
      ++dropped;
      return;
    }
    events.push_back(e);
  }
  int site_of(const SiteKey& k) {
    auto [it, fresh] = site_index.try_emplace(k, int(sites.size()));
    if (fresh) sites.push_back(Site{k.op ? k.op : "", k.file ? k.file : "", k.line, k.stream});
    return it->second;
  }
};

Recorder& rec() {
  static Recorder* r = new Recorder;  // never destroyed: storages may be freed at exit
  return *r;
}

int8_t device_code(Device d) { return d.is_cpu() ? int8_t(-1) : int8_t(d.index); }

uint64_t queued_now() { return Engine::get().inflight_bytes(); }
uint64_t cached_now(Device d) { return Allocator::get(d).stats().cached_bytes; }

Event event_of(const Live& b, EventKind kind, int64_t t) {
  Event e;
  e.t_ns = t;
  e.block = b.id;
  e.bytes = b.bytes;
  e.kind = kind;
  e.role = b.role;
  e.device = device_code(b.device);
  return e;
}

// Under r.mu: sets b's role by tag()'s rule; records the change.
void retag_locked(Recorder& r, Live& b, Role role) {
  if (b.role == role || (role == Role::activation && b.role != Role::temporary)) return;
  Event e = event_of(b, EventKind::retag, r.now());
  e.from = b.role;
  e.role = role;
  b.role = role;
  r.push(e);
}

// Gives deferred storage s's block `role` now, or when it takes one (on_materialized).
void role_of_deferred_locked(Recorder& r, const Storage* s, Role role) {
  if (const Storage* b = s->backing()) {
    if (auto it = r.live.find(b); it != r.live.end()) retag_locked(r, it->second, role);
    return;
  }
  Role& pending = r.pending_roles.try_emplace(s, role).first->second;
  if (!(role == Role::activation && pending != Role::temporary)) pending = role;
}

}  // namespace

void start(RecordOptions options) {
  Recorder& r = rec();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.options = options;
    r.t0 = std::chrono::steady_clock::now();
    r.live.clear();
    r.pending_sites.clear();
    r.deferred.clear();
    r.pending_roles.clear();
    r.events.clear();
    r.dropped = 0;
    r.site_index.clear();
    r.sites.clear();
    r.marks.clear();
  }
  detail::g_recording.store(true);
}

void stop() { detail::g_recording.store(false); }

bool recording() { return detail::on(); }

Snapshot snapshot() {
  Snapshot s;
  Recorder& r = rec();
  // The engine's lock first (see the top): under it, which blocks queued work holds is
  // stable, and no storage of the table can be freed while the table is read.
  Engine::get().run_locked([&] {
    std::lock_guard<std::mutex> lock(r.mu);
    s.blocks.reserve(r.live.size());
    for (const auto& [storage, b] : r.live) {
      Block out;
      out.id = b.id;
      out.device = b.device;
      out.bytes = b.bytes;
      out.requested = b.requested;
      out.role = b.role;
      out.queued = Reclaimer::references_held(storage) > 0;
      out.t_ns = b.t_ns;
      out.site = b.site;
      s.blocks.push_back(out);
    }
    s.events = r.events;
    s.sites = r.sites;
    s.marks = r.marks;
    s.dropped_events = r.dropped;
  });
  std::sort(s.blocks.begin(), s.blocks.end(),
            [](const Block& a, const Block& b) { return a.id < b.id; });
  // Untracked: what each allocator counts as active beyond the recorded blocks.
  std::vector<size_t> recorded;
  for (const Block& b : s.blocks) {
    const size_t i = b.device.is_cpu() ? 0 : size_t(b.device.index) + 1;
    if (recorded.size() <= i) recorded.resize(i + 1, 0);
    recorded[i] += b.bytes;
  }
  s.untracked_bytes.assign(std::max<size_t>(recorded.size(), 1), 0);
  for (size_t i = 0; i < s.untracked_bytes.size(); ++i) {
    const Device d = i == 0 ? Device::cpu() : Device::cuda(int(i - 1));
    const size_t active = Allocator::get(d).stats().active_bytes;
    const size_t mine = i < recorded.size() ? recorded[i] : 0;
    s.untracked_bytes[i] = active > mine ? active - mine : 0;
  }
  return s;
}

void tag(const Tensor& t, Role role) {
  if (!detail::on() || !t.defined()) return;
  detail::tag_storage(t.storage(), role);
}

void mark(std::string label) {
  if (!detail::on()) return;
  Recorder& r = rec();
  const uint64_t queued = queued_now();
  std::lock_guard<std::mutex> lock(r.mu);
  Event e;
  e.t_ns = r.now();
  e.kind = EventKind::mark;
  e.queued_bytes = queued;
  e.site = uint32_t(r.marks.size());
  r.marks.push_back(std::move(label));
  r.push(e);
}

RoleScope::RoleScope(Role role) : prev_(tl_role) { tl_role = role; }
RoleScope::~RoleScope() { tl_role = prev_; }

namespace detail {

void on_take(const Storage* s, size_t requested, const char* op, bool workspace) {
  Recorder& r = rec();
  const uint64_t queued = queued_now();
  const uint64_t cached = cached_now(s->device());
  std::lock_guard<std::mutex> lock(r.mu);
  if (!on()) return;  // stopped meanwhile
  Live b{r.next_id++, s->bytes(), requested, s->device(), workspace ? Role::workspace : tl_role,
         r.now(),     -1,         s};
  if (op) b.site = r.site_of(SiteKey{op, nullptr, 0, -1});
  r.live[s] = b;
  Event e = event_of(b, EventKind::take, b.t_ns);
  e.queued_bytes = queued;
  e.cached_bytes = cached;
  e.site = b.site < 0 ? kNoSite : uint32_t(b.site);
  r.push(e);
  if (tl_since_recorded.size() >= kMaxSinceRecorded) tl_since_recorded.clear();
  tl_since_recorded.push_back({s, b.id});
}

void on_free(const Storage* s) {
  Recorder& r = rec();
  const uint64_t queued = queued_now();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(s);
  if (it == r.live.end()) return;  // taken before start()
  Event e = event_of(it->second, EventKind::free, r.now());
  e.queued_bytes = queued;
  // The block is about to join the cache: count it there already.
  e.cached_bytes = cached_now(s->device()) + it->second.bytes;
  r.live.erase(it);
  r.push(e);
}

void on_returned(Device d, size_t bytes) {
  Recorder& r = rec();
  const uint64_t cached = cached_now(d);
  std::lock_guard<std::mutex> lock(r.mu);
  Event e;
  e.t_ns = r.now();
  e.kind = EventKind::returned;
  e.bytes = bytes;
  e.cached_bytes = cached;
  e.device = device_code(d);
  r.push(e);
}

void on_submit(const Storage* const* writes, size_t n, const char* op, const char* file,
               uint32_t line, int stream) {
  Recorder& r = rec();
  const uint64_t queued = queued_now();  // with the task's storages held already
  std::lock_guard<std::mutex> lock(r.mu);
  for (size_t i = 0; i < n; ++i) {
    const int site = r.site_of(SiteKey{op, file, line, stream});
    const Storage* w = writes[i];
    if (w->is_deferred()) {
      if (!w->backing()) {  // its block is taken when its task runs: on_materialized
        r.pending_sites[w] = site;
        continue;
      }
      w = w->backing();
    }
    auto it = r.live.find(w);
    if (it == r.live.end()) continue;
    Live& b = it->second;
    // The first queued write names the block; later in-place writes do not rename it.
    if (b.site >= 0 && !r.sites[size_t(b.site)].file.empty()) continue;
    b.site = site;
    Event e = event_of(b, EventKind::site, r.now());
    e.site = uint32_t(site);
    e.queued_bytes = queued;
    r.push(e);
  }
}

void on_materialized(const Storage* deferred, const Storage* block) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(block);
  if (auto p = r.pending_sites.find(deferred); p != r.pending_sites.end()) {
    const int site = p->second;
    r.pending_sites.erase(p);
    if (it != r.live.end()) {
      it->second.site = site;
      Event e = event_of(it->second, EventKind::site, r.now());
      e.site = uint32_t(site);
      r.push(e);
    }
  }
  if (auto p = r.pending_roles.find(deferred); p != r.pending_roles.end()) {
    if (it != r.live.end()) retag_locked(r, it->second, p->second);
    r.pending_roles.erase(p);
  }
}

void on_deferred(const Storage* s) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!on()) return;
  const uint64_t id = r.next_id++;
  r.deferred[s] = id;
  if (tl_role != Role::temporary) r.pending_roles[s] = tl_role;
  if (tl_since_recorded.size() >= kMaxSinceRecorded) tl_since_recorded.clear();
  tl_since_recorded.push_back({s, id});
}

void on_deferred_gone(const Storage* s) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  r.deferred.erase(s);
  r.pending_sites.erase(s);
  r.pending_roles.erase(s);
}

void on_recorded_op() {
  if (tl_since_recorded.empty()) return;
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Taken& t : tl_since_recorded) {
    auto it = r.live.find(t.storage);
    if (it != r.live.end() && it->second.id == t.id) {
      retag_locked(r, it->second, Role::activation);
    } else if (auto d = r.deferred.find(t.storage); d != r.deferred.end() && d->second == t.id) {
      role_of_deferred_locked(r, t.storage, Role::activation);
    }
  }
  tl_since_recorded.clear();
}

void forget_taken() { tl_since_recorded.clear(); }

void tag_storage(const Storage* s, Role role) {
  Recorder& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  if (s->is_deferred()) {
    // Its block, once it has one: checked under the lock, which on_materialized takes after
    // the block is set, so that a role noted here is never missed.
    if (r.deferred.count(s) || !s->backing()) {
      role_of_deferred_locked(r, s, role);
      return;
    }
    s = s->backing();
  }
  auto it = r.live.find(s);
  if (it != r.live.end()) {
    retag_locked(r, it->second, role);
    return;
  }
  if (s->is_slot()) return;  // a replay's binding: the arena's block is recorded
  // Taken before start(): recorded from now on, with its role.
  Live b{r.next_id++, s->bytes(), s->requested_bytes(), s->device(), role, r.now(), -1, s};
  r.live[s] = b;
  r.push(event_of(b, EventKind::take, b.t_ns));
}

}  // namespace detail
}  // namespace tide::memory
