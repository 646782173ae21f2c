// Output files of the `tide` command (--trace, --csv, --svg, --save): checked before the
// run, so that a typo in a path does not cost the whole run, and written through a
// temporary file renamed into place, so that a failed write leaves no partial file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "examples/cli/commands.h"

namespace tide::cli {

namespace {

// Next to the output, so that the rename stays within one file system (and is atomic).
std::string temp_path(const std::string& path) {
  return path + "." + std::to_string(::getpid()) + ".tmp";
}

[[noreturn]] void fail(const std::string& opt, const std::string& path, const std::string& what,
                       const std::string& reason) {
  throw std::runtime_error(opt + " " + path + ": " + what + ": " + reason);
}

}  // namespace

std::string take_output_option(const Args& args, size_t& i) {
  const std::string opt = args[i];
  std::string path = take_option_value(args, i);
  check_output(opt, path);
  return path;
}

void check_output(const std::string& opt, const std::string& path) {
  if (path.empty()) throw UsageError(opt + " needs a file name, got ''");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    fail(opt, path, "cannot write", std::strerror(EISDIR));
  // Creating the temporary file proves the directory exists and is writable.
  const std::string tmp = temp_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) fail(opt, path, "cannot write", std::strerror(errno));
  ::close(fd);
  ::unlink(tmp.c_str());
}

void write_output(const std::string& opt, const std::string& path,
                  const std::function<void(const std::string& tmp)>& write) {
  const std::string tmp = temp_path(path);
  errno = 0;
  try {
    write(tmp);
  } catch (const std::exception& e) {
    // The writers throw their own message; errno still holds the failed call's reason.
    const int err = errno;
    std::remove(tmp.c_str());
    fail(opt, path, "cannot write",
         err ? std::string(std::strerror(err)) + " (" + e.what() + ")" : e.what());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(opt, path, "cannot rename " + tmp + " into place", std::strerror(err));
  }
}

}  // namespace tide::cli
