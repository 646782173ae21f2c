// The safetensors header: its length check and a JSON reader directed by the format's schema
// that keeps only what load needs (memory grows with entries, never with arrays or nesting).
// Hand-written: a JSON library (Debian's nlohmann-json3-dev) would need these limits
// re-implemented.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace tide::nn::safetensors {

// One tensor of the header: its name, dtype, shape and byte range in the data section.
struct Entry {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
};

// Largest header a file may declare, as in the reference implementation: a corrupt length
// is refused before anything of that size is allocated.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Throws tide::Error "[load] <path>: <what>".
[[noreturn]] void load_fail(const std::string& path, const std::string& what);

// The format's name of a dtype ("F32"), and the dtype of a name; false for an unsupported one.
const char* st_name(DType t);
bool st_dtype(const std::string& s, DType& out);

// The header length against the file's size (when known: a device or pipe has none) and
// the limit. Throws "[load] <path>: header length ..." when it is beyond either.
void check_header_length(uint64_t n, std::optional<uint64_t> size, const std::string& path);

// Parses the header and checks every entry on its own and against the others: shape,
// offsets within the data section (of data_len bytes, when known) and matching the shape,
// no two names alike, no two entries overlapping. Returns the entries in file order; throws
// "[load] <path>: ..." naming the problem.
std::vector<Entry> parse_header(std::string_view header, std::optional<uint64_t> data_len,
                                const std::string& path);

}  // namespace tide::nn::safetensors
