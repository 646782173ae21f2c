// save/load of a module's named parameters and buffers (Module::named_state, PyTorch's
// state_dict names and order) in the safetensors format:
//   8 bytes: little-endian uint64 header length N (at most 100,000,000)
//   N bytes: JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
//            (optionally "__metadata__": {...}); offsets are relative to the data section
//   rest:    raw little-endian element data
// Supported dtypes: F32, F64, I32, I64, BF16, F16 (tide's six); 16-bit values are kept bit for
// bit both ways. A file whose dtype differs from the module's tensor is refused, not converted
// ("[load] <path>: 'w' has dtype BF16 in the file but float32 in the module"): cast the module
// (or the file's tensors) first, so a load never rounds silently.
#pragma once

#include <string>
#include <string_view>

#include "nn/module.h"

namespace tide::nn {

// Waits for every parameter's and buffer's value and writes them, in named_state() order, packed
// without gaps. Throws "[save] <path>: ..." when the file cannot be written.
void save(const Module& module, const std::string& path);

// Reads `path` and copies each tensor into the module's parameter or buffer of the same name, in
// place (queued copies under NoGrad; the parameter handles stay the same). Everything is
// validated before anything is copied, so a failed load leaves the module unchanged.
// The file is read only as far as its header declares (a device such as /dev/zero or a
// pipe is read no further), and every length and offset is checked before it is used.
// Throws tide::Error "[load] <path>: ..." naming the problem: file missing or truncated,
// header length beyond the file or the limit, malformed JSON, bad entry fields,
// unsupported dtype, offsets out of range, overlapping or not matching the shape, and
// names missing from the file or not in the module, shape or dtype mismatches; also when
// memory runs out. Nothing else escapes.
void load(Module& module, const std::string& path);

// The same from a whole file's bytes in memory (what load reads from disk); `name` stands
// for the path in error messages.
void load_bytes(Module& module, std::string_view bytes, const std::string& name);

}  // namespace tide::nn
