// A sticky device fault, in a process of its own (it leaves cuda:0 unusable): a kernel that
// writes through a null pointer. The failure must surface at the next sync with a message
// that names the device, the first op launched and not complete and TIDE_ENGINE=sync;
// later work on the GPU is refused at the call; the CPU keeps working; nothing hangs.
// Exits 77 without a GPU, 0 when every check holds, 1 otherwise.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "core/cuda/runtime.h"
#include "tide.h"

namespace {

__global__ void write_through_null(int* p) { *p = 1; }

int failures = 0;
void check(bool ok, const char* what, const std::string& detail = {}) {
  std::printf("%s: %s%s%s\n", ok ? "ok  " : "FAIL", what, detail.empty() ? "" : " -- ",
              detail.c_str());
  failures += ok ? 0 : 1;
}

}  // namespace

int main() {
  using namespace tide;
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device on this machine: skipped\n");
    return 77;
  }
  Device gpu = Device::cuda(0);
  Tensor x = ones({4}, DType::float32, gpu);
  x.wait_to_read();
  Engine::get().submit(
      gpu, "bad_kernel", {x.storage()}, {x.storage()},
      [](const KernelContext& ctx) {
        write_through_null<<<1, 1, 0, cudaStream_t(ctx.stream)>>>(nullptr);
      },
      Site::current());
  Tensor y = x + 1.0;
  std::string msg;
  try {
    y.wait_to_read();
  } catch (const Error& e) {
    msg = e.what();
  }
  check(!msg.empty(), "the fault surfaces at the next sync", msg);
  check(msg.find("cuda:0 failed") != std::string::npos, "names the device", msg);
  check(msg.find("TIDE_ENGINE=sync") != std::string::npos, "advises TIDE_ENGINE=sync");
  check(msg.find("bad_kernel") != std::string::npos, "names the first op not complete");
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
