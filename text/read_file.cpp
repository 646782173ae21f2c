// read_file (see read_file.h).
#include "text/read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <system_error>

#include "core/error.h"

namespace tide::text {

namespace fs = std::filesystem;

std::string read_file(const std::string& path, const std::string& op) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  TIDE_CHECK(st.type() != fs::file_type::not_found, op, path, ": no such file");
  TIDE_CHECK(!ec, op, path, ": cannot be read: ", ec.message());
  TIDE_CHECK(st.type() != fs::file_type::directory, op, path, ": is a directory, not a file");
  TIDE_CHECK(st.type() == fs::file_type::regular, op, path, ": is not a regular file");
  std::ifstream in(path, std::ios::binary);
  TIDE_CHECK(in, op, path, ": cannot be opened: ", std::strerror(errno));
  const uintmax_t size = fs::file_size(path, ec);
  TIDE_CHECK(!ec, op, path, ": cannot be read: ", ec.message());
  std::string bytes;
  try {
    bytes.resize(size_t(size));
  } catch (const std::bad_alloc&) {
    throw Error(op, detail::concat(path, ": its ", size, " bytes do not fit in memory"));
  } catch (const std::length_error&) {
    throw Error(op, detail::concat(path, ": its ", size, " bytes do not fit in memory"));
  }
  in.read(bytes.data(), std::streamsize(size));
  TIDE_CHECK(in.gcount() == std::streamsize(size), op, path, ": cannot be read (", in.gcount(),
             " of ", size, " bytes)");
  return bytes;
}

}  // namespace tide::text
