#include "core/rng.h"

namespace tide {

Generator& default_generator() {
  static Generator g(0x7469646573656564ull);  // "tideseed"
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tide
