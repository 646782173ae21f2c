// A sticky device fault, in a process of its own (it leaves cuda:0 unusable): a kernel that
// writes through a null pointer, queued as an eager op (no argument) or inside a traced
// function, so that it faults inside the CUDA graph a replay launches (argument `graph`).
// The failure must surface at the next sync with a message that names the device, the
// first op launched and not complete (the op, or the graph's `trace_replay`) and
// TIDE_ENGINE=sync; later work on the GPU is refused at the call; the CPU keeps working;
// nothing hangs. Exits 77 without a GPU, 0 when every check holds, 1 otherwise.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "core/cuda/runtime.h"
#include "tide.h"
#include "trace/trace.h"

namespace {

__global__ void write_through_null(int* p) { *p = 1; }

int failures = 0;
void check(bool ok, const char* what, const std::string& detail = {}) {
  std::printf("%s: %s%s%s\n", ok ? "ok  " : "FAIL", what, detail.empty() ? "" : " -- ",
              detail.c_str());
  failures += ok ? 0 : 1;
}

// Queues the faulting kernel as an op that reads and writes t (recorded as a graph node
// when called inside a trace).
void queue_bad_kernel(const tide::Tensor& t) {
  tide::Engine::get().submit(
      t.device(), "bad_kernel", {t.storage()}, {t.storage()},
      [](const tide::KernelContext& ctx) {
        write_through_null<<<1, 1, 0, cudaStream_t(ctx.stream)>>>(nullptr);
      },
      tide::Site::current());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tide;
  // ctest passes --gtest_brief=1 to every CUDA test binary: only `graph` is ours.
  std::string mode = "eager";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "graph") mode = "graph";
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device on this machine: skipped\n");
    return 77;
  }
  Device gpu = Device::cuda(0);
  Tensor x = ones({4}, DType::float32, gpu);
  x.wait_to_read();
  Tensor y;
  // Traced: recorded at the first call, then every call replays one CUDA graph.
  auto step = trace::function(
      [](const Tensor& in) {
        Tensor t = in + 1.0;
        queue_bad_kernel(t);
        return t * 2.0;
      },
      {.name = "faulting_step"});
  if (mode == "graph") {
    y = step(x);
  } else {
    queue_bad_kernel(x);
    y = x + 1.0;
  }
  std::string msg;
  try {
    y.wait_to_read();
  } catch (const Error& e) {
    msg = e.what();
  }
  check(!msg.empty(), "the fault surfaces at the next sync", msg);
  check(msg.find("cuda:0 failed") != std::string::npos, "names the device", msg);
  check(msg.find("TIDE_ENGINE=sync") != std::string::npos, "advises TIDE_ENGINE=sync");
  const char* first = mode == "graph" ? "trace_replay" : "bad_kernel";
  check(msg.find(first) != std::string::npos, "names the first op not complete", first);
  if (mode == "graph")
    check(step.stats().replays >= 1, "the fault was inside a replayed graph",
          std::to_string(step.stats().replays) + " replays");
  std::string refused;
  try {
    (void)(x * 2.0);
  } catch (const Error& e) {
    refused = e.what();
  }
  check(refused.find("cannot queue work on cuda:0") != std::string::npos,
        "later GPU work is refused at the call", refused);
  check((ones({2}) + 1.0).to_vector<float>() == std::vector<float>{2, 2}, "the CPU keeps working");
  return failures ? 1 : 0;
}
