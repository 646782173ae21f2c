#include "train/text_file.h"

#include <fstream>

#include "core/error.h"

namespace tide::train {

void write_text_file(const std::string& path, const std::string& text, const char* op) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TIDE_CHECK(f.is_open(), op, "cannot write ", path);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.close();
  TIDE_CHECK(!f.fail(), op, "cannot write ", path);
}

}  // namespace tide::train
