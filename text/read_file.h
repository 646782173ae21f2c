// Reads a whole file into memory for the text loaders, with errors that name the file.
// Not done here: streaming, memory mapping, decoding.
#pragma once

#include <string>

namespace tide::text {

// The bytes of the regular file at `path`. Throws tide::Error "[op] <path>: ..." when it does
// not exist, is a directory or not a regular file (a device or a pipe, which may never end),
// cannot be opened or read, or does not fit in memory.
std::string read_file(const std::string& path, const std::string& op);

}  // namespace tide::text
