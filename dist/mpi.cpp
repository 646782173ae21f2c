// The MPI backend (built when CMake found MPI): MpiCommunicator over a duplicate of
// MPI_COMM_WORLD, and mpi_world(), which initialises MPI once and finalises it at exit.
// Uses MPI's C API only.
#include "dist/mpi.h"

#include <mpi.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"
#include "dist/communicator.h"

namespace tide::dist {
namespace {

// MPI_THREAD_SERIALIZED allows one MPI call at a time in the process; the workers of
// several groups, or a sync that runs a queued collective on the calling thread, could
// otherwise overlap.
std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}

void check(int code, const char* call, const char* op) {
  if (code != MPI_SUCCESS) [[unlikely]]
    throw Error(op, std::string(call) + " failed: " + error_string(code));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    // The bits, for broadcast: all_reduce refuses the 16-bit types at the call.
    case DType::bfloat16:
    case DType::float16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

// MPI counts are ints: a larger buffer goes in chunks of this many elements.
constexpr int64_t kMaxChunk = int64_t(1) << 30;

template <class F>
void in_chunks(void* data, int64_t count, DType dtype, F&& f) {
  char* p = static_cast<char*>(data);
  for (int64_t done = 0; done < count; done += kMaxChunk) {
    const int64_t n = count - done < kMaxChunk ? count - done : kMaxChunk;
    f(p + size_t(done) * size_of(dtype), int(n));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", "dist");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", "dist");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp red, void*,
                  const char* op) override {
    {
      std::lock_guard lock(mpi_mutex());
      in_chunks(data, count, dtype, [&](void* p, int n) {
        check(MPI_Allreduce(MPI_IN_PLACE, p, n, mpi_type(dtype), MPI_SUM, comm_), "MPI_Allreduce",
              op);
      });
    }
    if (red != ReduceOp::average) return;  // MPI has no average: divide the sum here
    dispatch_floating(dtype, [&](auto zero) {
      using T = decltype(zero);
      T* p = static_cast<T*>(data);
      const T n = T(size_);
      for (int64_t i = 0; i < count; ++i) p[i] /= n;
    });
  }
  void broadcast(void* data, int64_t count, DType dtype, int root, void*, const char* op) override {
    std::lock_guard lock(mpi_mutex());
    in_chunks(data, count, dtype, [&](void* p, int n) {
      check(MPI_Bcast(p, n, mpi_type(dtype), root, comm_), "MPI_Bcast", op);
    });
  }
  void barrier(const char* op) override {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Barrier(comm_), "MPI_Barrier", op);
  }
  void all_gather(std::span<const int64_t> in, std::span<int64_t> out, const char* op) override {
    TIDE_ASSERT(out.size() == in.size() * size_t(size_), "all_gather output size");
    std::lock_guard lock(mpi_mutex());
    check(MPI_Allgather(in.data(), int(in.size()), MPI_INT64_T, out.data(), int(in.size()),
                        MPI_INT64_T, comm_),
          "MPI_Allgather", op);
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

ProcessGroup* g_world = nullptr;

// At exit, before the engine's own shutdown (registered earlier, so run later): the world
// group's queued collectives run, then MPI is finalised on the main thread as MPI asks.
void finalize_at_exit() {
  g_world->stream().synchronize();
  std::lock_guard lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

ProcessGroup* make_world(int* argc, char*** argv) {
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (initialized) {  // the program initialised MPI itself: it finalises it too
    MPI_Query_thread(&provided);
  } else {
    check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread", "dist");
  }
  TIDE_CHECK(provided >= MPI_THREAD_SERIALIZED, "dist", "MPI offers only ",
             thread_level_name(provided),
             "; tide calls MPI from a worker thread and needs "
             "MPI_THREAD_SERIALIZED or better");
  // A communicator of our own: tide's traffic never matches the program's own MPI calls,
  // and errors on it return instead of aborting the job.
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", "dist");
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "dist");
  auto* world = new ProcessGroup(std::make_unique<MpiCommunicator>(comm));
  g_world = world;  // lives until exit: collectives may be queued until then
  if (!initialized) std::atexit(finalize_at_exit);
  return world;
}

}  // namespace

bool mpi_available() { return true; }

ProcessGroup& mpi_world(int* argc, char*** argv) {
  static ProcessGroup* world = make_world(argc, argv);  // once, even with racing callers
  return *world;
}

}  // namespace tide::dist
