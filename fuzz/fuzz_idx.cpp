// libFuzzer target for the IDX loader: train::decode_idx on any input, as labels (1 dim) and
// as images (3 dims), plain or gzipped; images that decode are batched through an IdxSource
// (with labels made here) for one shuffled epoch, flattened or not.
// The only outcomes allowed are success and tide::Error; anything else (a crash, another
// exception, a sanitizer report, a leak) is a finding. Not done here: reading files
// (read_idx feeds the same decoder from a file).
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tide.h"
#include "train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tide::train;
  const std::span<const uint8_t> bytes(data, size);
  try {
    (void)decode_idx(bytes, 1, "input");
  } catch (const tide::Error&) {
  }
  try {
    IdxArray images = decode_idx(bytes, 3, "input");
    // The labels are this harness's allocation, not the loader's: bound them. (With rows
    // or cols 0 an image file may declare 2^32 images in 16 bytes; the labels file, of n
    // bytes, is what bounds n in IdxSource.)
    const int64_t n = images.dims[0];
    if (n > 4096) return 0;
    IdxArray labels{{n}, std::vector<uint8_t>(size_t(n), uint8_t(size % 10))};
    IdxSource src(std::move(images), std::move(labels),
                  IdxOptions().batch_size(1 + int64_t(size % 7)).flatten(size % 2 == 0).seed(size));
    while (auto b = src.next_batch()) (void)b;
  } catch (const tide::Error&) {
  }
  return 0;
}
