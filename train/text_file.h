// Writing a document (an SVG, an HTML page) to a file in one piece.
#pragma once

#include <string>

namespace tide::train {

// Writes `text` to `path`, replacing what was there. Throws tide::Error("[op] cannot write
// <path>") when the file cannot be opened or written. `op` is a string literal.
void write_text_file(const std::string& path, const std::string& text, const char* op);

}  // namespace tide::train
