// --dtype on the training commands (train, mlp-memory, gpt train): the step's mixed
// precision (DESIGN §12). float32 runs the model as it is; bfloat16 and float16 run each
// forward and loss under Autocast (ops/autocast.h), and float16 also scales the loss with a
// GradScaler (train/grad_scaler.h), as PyTorch's AMP recipe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "examples/cli/commands.h"

namespace tide::cli {

// The help line of --dtype, shared by the three commands.
inline constexpr const char* kDtypeHelp =
    "  --dtype D     float32 (default), bfloat16 or float16: the forward and the loss under\n"
    "                autocast (GEMMs in D; softmax, norms, losses, the parameters and the\n"
    "                optimizer in float32); float16 also scales the loss (GradScaler)\n";

// The autocast dtype named by --dtype's value at args[i + 1] (nullopt for float32);
// advances i. Throws UsageError for anything but float32, bfloat16 or float16.
std::optional<DType> take_dtype_option(const Args& args, size_t& i);

// "float32" or "bfloat16 autocast" / "float16 autocast with loss scaling", for headings.
std::string precision_label(std::optional<DType> low);

}  // namespace tide::cli
