// --dtype on the training commands (train, mlp-memory, gpt train): the step's mixed
// precision (DESIGN §12). float32 runs the model as it is; bfloat16 and float16 run each
// forward and loss under Autocast (ops/autocast.h), and float16 also scales the loss with a
// GradScaler (train/grad_scaler.h), as PyTorch's AMP recipe. --tf32 runs the float32 GEMMs
// at the `high` matmul precision (core/matmul_precision.h): TF32 on a GPU.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/matmul_precision.h"
#include "examples/cli/commands.h"

namespace tide::cli {

// The help line of --dtype, shared by the three commands.
inline constexpr const char* kDtypeHelp =
    "  --dtype D     float32 (default), bfloat16 or float16: the forward and the loss under\n"
    "                autocast (GEMMs in D; softmax, norms, losses, the parameters and the\n"
    "                optimizer in float32); float16 also scales the loss (GradScaler)\n"
    "  --tf32        float32 GEMMs in TF32 on a GPU (matmul precision `high`; the CPU\n"
    "                computes them in full precision either way)\n";

// The autocast dtype named by --dtype's value at args[i + 1] (nullopt for float32);
// advances i. Throws UsageError for anything but float32, bfloat16 or float16.
std::optional<DType> take_dtype_option(const Args& args, size_t& i);

// "float32" or "bfloat16 autocast" / "float16 autocast with loss scaling", then ", TF32
// GEMMs" under --tf32, for headings.
std::string precision_label(std::optional<DType> low, bool tf32);

// The matmul precision of a run with or without --tf32.
MatmulPrecision matmul_precision_for(bool tf32);

}  // namespace tide::cli
