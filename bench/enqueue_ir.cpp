// N tiny ops `y = x + 1` (1x2 floats) queued from one thread with a wait_all every 256:
// the program bench/enqueue_instructions.sh runs under callgrind twice, with two N, to
// count the instructions one op costs (enqueue + execution, both threads), free of
// start-up and timing noise.
#include <cstdlib>

#include "tide.h"

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 100000;
  tide::Tensor x = tide::ones({1, 2});
  tide::Tensor y;
  tide::wait_all();
  for (long i = 0; i < n; ++i) {
    y = x + 1;
    if ((i & 255) == 255) tide::wait_all();
  }
  tide::wait_all();
  return y.to_vector<float>()[0] == 2.0f ? 0 : 1;
}
