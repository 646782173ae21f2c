// Runs a few queued ops through an installed tide and checks the values. Exits 1 when a
// value is wrong, so CI fails on a broken package rather than printing "OK".
#include <cstdio>
#include <vector>

#include "tide.h"

int main() {
  tide::Tensor x = tide::ones({2, 3});
  tide::Tensor y = x * 2.0 + 1.0;                                // all 3
  tide::Tensor r = tide::from_data({0, 1, 2, 3, 4, 5}, {2, 3});  // rows 0 1 2, 3 4 5
  tide::Tensor z = tide::add(y, r);                              // rows 3 4 5, 6 7 8

  int failures = 0;
  auto expect = [&](const char* what, double got, double want) {
    if (got != want) {
      std::fprintf(stderr, "tide_consumer: %s = %g, expected %g\n", what, got, want);
      ++failures;
    }
  };
  expect("sum(z)", tide::sum(z).item<double>(), 33.0);
  expect("mean(y)", tide::mean(y).item<double>(), 3.0);
  expect("max(z)", tide::max(z).item<double>(), 8.0);
  std::vector<float> col = tide::sum(z, 0).to_vector<float>();  // {9, 11, 13}
  expect("size(sum(z, 0))", double(col.size()), 3.0);
  for (size_t i = 0; i < col.size(); ++i) expect("sum(z, 0)[i]", col[i], 9.0 + 2.0 * double(i));

  if (failures == 0) std::printf("tide_consumer: installed package works\n");
  return failures == 0 ? 0 : 1;
}
