// ProcessGroup: the checks at the call, and the task each collective queues on the
// communication stream (agreement first, then the backend call).
#include "dist/process_group.h"

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/capture.h"
#include "core/error.h"
#include "dist/agreement.h"
#include "ops/autograd.h"
#include "ops/op_util.h"

namespace tide::dist {
namespace {

using tide::detail::check_defined;
using tide::detail::describe;

constexpr const char* kAllReduce = "all_reduce";
constexpr const char* kBroadcast = "broadcast";
constexpr const char* kBarrier = "barrier";

bool tracing() { return detail::capturing() != nullptr; }

// Where a collective's tensor lives: resolved when the task runs (s->data()), with the
// tensor's element offset, count and dtype taken at the call.
struct Elements {
  Storage* s;
  size_t byte_offset;
  int64_t count;
  DType dtype;
  explicit Elements(const Tensor& t)
      : s(t.storage()),
        byte_offset(size_t(t.offset()) * size_of(t.dtype())),
        count(t.numel()),
        dtype(t.dtype()) {}
  void* data() const { return static_cast<char*>(s->data()) + byte_offset; }
};

void check_tensor(const Tensor& t, const Communicator& comm, const char* op) {
  check_defined(t, op);
  TIDE_CHECK(t.device() == comm.device(), op, "needs a tensor on ", comm.device().str(),
             " (this group's ", comm.backend(), " backend), got ", describe(t), " on ",
             t.device().str(),
             comm.device().is_cpu() ? ": tensors on a GPU need an NCCL group (dist::nccl_world)"
                                    : ": CPU tensors need an MPI group (dist::mpi_world)");
  TIDE_CHECK(!(t.requires_grad() && autograd::grad_enabled()), op, "cannot update ", describe(t),
             " in place: it requires grad and grad mode is on; use NoGrad");
}

Device comm_device(const Communicator* comm) {
  TIDE_ASSERT(comm != nullptr, "a process group needs a communicator");
  return comm->device();
}

// "[op] message" -> "message"
std::string message_of(const Error& e, const char* op) {
  std::string what = e.what(), prefix = std::string("[") + op + "] ";
  return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
}

// "rank 1 of 2", for messages.
std::string where(const Communicator& comm) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size());
}

// The ranks' agreement on one collective (dist/agreement.h), its error naming this rank.
void agree(Communicator& comm, const CollectiveDesc& desc, const Storage* s, const char* op) {
  try {
    check_agreement(comm, desc, s->failure() != nullptr, op);
  } catch (const Error& e) {
    throw Error(op, message_of(e, op) + " (" + where(comm) + ")");
  }
}

// A traced collective on a GPU: its CUDA graph holds the backend's kernel, and the
// agreement, a host exchange, runs before every launch of the graph.
class Agreement final : public tide::detail::ReplayHook {
 public:
  Agreement(Communicator* comm, CollectiveDesc desc, const Storage* s, const char* op)
      : comm_(comm), desc_(std::move(desc)), s_(s), op_(op) {}
  void before_replay() override { agree(*comm_, desc_, s_, op_); }
  bool on_every_rank(bool ok) override {
    const int64_t mine[1] = {ok ? 1 : 0};
    std::vector<int64_t> all(size_t(comm_->size()));
    comm_->all_gather(mine, all, op_);
    return std::all_of(all.begin(), all.end(), [](int64_t v) { return v == 1; });
  }

 private:
  Communicator* comm_;
  CollectiveDesc desc_;
  const Storage* s_;
  const char* op_;
};

// Queues call() on the group's stream, writing `s`. Eagerly, `s` is declared written only,
// which orders the task as read+write would (after the writes and reads queued before it,
// before everything queued after it) but lets it run when `s` holds a failure: it must
// still take part in the agreement, or the other ranks would wait for it for ever.
// Recorded in a trace, the node reads and writes `s` (so the planner keeps what was copied
// in before it) and the group's `order` token, which chains the group's collectives in the
// order they were recorded: a replay that runs independent branches at once
// (trace::Options::streams) must still call them in the same order on every rank.
template <class Call>
void queue(Stream stream, Communicator* comm, const char* op, Storage* s, Storage* order,
           CollectiveDesc desc, Call call, Site site) {
  StreamGuard guard(stream);
  Storage* touched[2] = {s, order};
  const bool traced = tracing();
  if (traced) detail::capturing()->add_replay_hook(std::make_shared<Agreement>(comm, desc, s, op));
  Engine::get().submit(
      comm->device(), op,
      traced ? std::span<Storage* const>(touched, 2) : std::span<Storage* const>(),
      std::span<Storage* const>(touched, traced ? 2 : 1),
      [comm, op, s, desc, call = std::move(call)](const KernelContext& ctx) {
        // Captured into a CUDA graph, the kernel is captured and nothing runs: the replays
        // agree first (Agreement). A loop body's iterations have no host step to agree in.
        if (!tide::detail::tl_graph_capture) agree(*comm, desc, s, op);
        else if (!tide::detail::tl_replay_hooks_run)
          throw Error(op,
                      "cannot be captured in a trace::loop body on a GPU: the ranks agree "
                      "on each collective on the host, which a WHILE node's iterations "
                      "never reach (the replay launches the nodes one by one instead)");
        try {
          call(ctx.stream);
        } catch (const Error& e) {
          throw Error(op, message_of(e, op) + " (" + desc.str() + ", " + where(*comm) + ")");
        }
      },
      site);
}

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<Communicator> comm)
    : comm_(std::move(comm)), stream_(Stream::create(comm_device(comm_.get()))) {
  detail::CapturePause not_recorded;  // a group made inside a trace still owns a real token
  order_ = Tensor::empty({1}, DType::int32, comm_->device(), "process_group");
}

ProcessGroup::~ProcessGroup() { stream_.synchronize(); }

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op, Site site) {
  check_tensor(t, *comm_, kAllReduce);
  if (is_half(t.dtype())) detail::throw_half_unsupported(t.dtype(), kAllReduce);
  TIDE_CHECK(op == ReduceOp::sum || is_floating(t.dtype()), kAllReduce,
             "average needs a floating tensor, got ", describe(t), " (use sum)");
  CollectiveDesc desc{Collective::all_reduce, int64_t(op), t.dtype(), t.shape()};
  const Elements e(t);
  Communicator* comm = comm_.get();
  queue(
      stream_, comm, kAllReduce, e.s, order_.storage(), desc,
      [comm, e, op](void* stream) {
        comm->all_reduce(e.data(), e.count, e.dtype, op, stream, kAllReduce);
      },
      site);
}

void ProcessGroup::broadcast(const Tensor& t, int root, Site site) {
  check_tensor(t, *comm_, kBroadcast);
  TIDE_CHECK(root >= 0 && root < size(), kBroadcast, "root ", root,
             " is not a rank of this group (", size(), " ranks)");
  CollectiveDesc desc{Collective::broadcast, root, t.dtype(), t.shape()};
  const Elements e(t);
  Communicator* comm = comm_.get();
  queue(
      stream_, comm, kBroadcast, e.s, order_.storage(), desc,
      [comm, e, root](void* stream) {
        comm->broadcast(e.data(), e.count, e.dtype, root, stream, kBroadcast);
      },
      site);
}

void ProcessGroup::barrier(Site site) {
  TIDE_CHECK(!tracing(), kBarrier,
             "cannot be recorded in a trace: it waits on the host (call it outside "
             "trace::function)");
  // A token written by the barrier task: its failure, if any, comes back through the
  // ordinary sync below.
  Tensor token = Tensor::empty({1}, DType::int32, comm_->device(), kBarrier);
  Communicator* comm = comm_.get();
  queue(
      stream_, comm, kBarrier, token.storage(), order_.storage(), CollectiveDesc{},
      [comm](void*) { comm->barrier(kBarrier); }, site);
  token.wait_to_read();
}

}  // namespace tide::dist
