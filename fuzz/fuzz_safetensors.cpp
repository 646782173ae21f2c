// libFuzzer target for the safetensors loader: nn::load_bytes on any input, into a small
// module of float32 and float64 parameters ("0.weight" (2, 3), "0.bias" (3), "1.weight"
// (3, 1) and "1.bias" (1) of F64), so inputs that name them also reach the copies.
// The only outcomes allowed are success and tide::Error; anything else (a crash, another
// exception, a sanitizer report, a leak) is a finding. Not done here: writing files (load
// reads its file the same way and hands the bytes to the same parser).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "nn/serialize.h"
#include "tide.h"

namespace {

tide::nn::Module& module() {
  static std::shared_ptr<tide::nn::Sequential> m = [] {
    auto s = std::make_shared<tide::nn::Sequential>();
    s->push_back(std::make_shared<tide::nn::Linear>(tide::nn::LinearOptions(2, 3)));
    s->push_back(std::make_shared<tide::nn::Linear>(
        tide::nn::LinearOptions(3, 1).dtype(tide::DType::float64)));
    return s;
  }();
  return *m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tide::nn::Module& m = module();
  try {
    tide::nn::load_bytes(m, std::string_view(reinterpret_cast<const char*>(data), size), "input");
    // The copies are queued: wait, so that an error in them is this input's.
    for (const auto& [name, t] : m.named_parameters()) t.wait_to_read();
  } catch (const tide::Error&) {
  }
  return 0;
}
