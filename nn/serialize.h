// save/load of a module's named parameters in the safetensors format:
//   8 bytes: little-endian uint64 header length N
//   N bytes: JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
//            (optionally "__metadata__": {...}); offsets are relative to the data section
//   rest:    raw little-endian element data
// Supported dtypes: F32, F64, I32, I64 (tide's four).
#pragma once

#include <string>

#include "nn/module.h"

namespace tide::nn {

// Waits for every parameter's value and writes them, in named_parameters() order, packed
// without gaps. Throws "[save] <path>: ..." when the file cannot be written.
void save(const Module& module, const std::string& path);

// Reads `path` and copies each tensor into the module's parameter of the same name, in
// place (queued copies under NoGrad; the parameter handles stay the same). Everything is
// validated before anything is copied, so a failed load leaves the module unchanged.
// Throws tide::Error "[load] <path>: ..." naming the problem: file missing or truncated,
// header length beyond the file, malformed JSON, bad entry fields, unsupported dtype,
// offsets out of range, overlapping or not matching the shape, and names missing from the
// file or not in the module, shape or dtype mismatches.
void load(Module& module, const std::string& path);

}  // namespace tide::nn
