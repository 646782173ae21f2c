// --dtype's parsing and labels (examples/cli/precision.h).
#include "examples/cli/precision.h"

namespace tide::cli {

std::optional<DType> take_dtype_option(const Args& args, size_t& i) {
  const std::string v = take_option_value(args, i);
  if (v == "float32") return std::nullopt;
  if (v == "bfloat16") return DType::bfloat16;
  if (v == "float16") return DType::float16;
  throw UsageError("--dtype needs float32, bfloat16 or float16, got '" + v + "'");
}

std::string precision_label(std::optional<DType> low, bool tf32) {
  std::string s = !low ? "float32"
                       : std::string(name(*low)) +
                             (*low == DType::float16 ? " autocast with loss scaling" : " autocast");
  return tf32 ? s + ", TF32 GEMMs" : s;
}

MatmulPrecision matmul_precision_for(bool tf32) {
  return tf32 ? MatmulPrecision::high : MatmulPrecision::highest;
}

}  // namespace tide::cli
