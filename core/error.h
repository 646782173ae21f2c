// tide::Error and the two kinds of check (docs/contributing.md, Errors).
// TIDE_CHECK is for user errors: it throws tide::Error with "[op] message". TIDE_ASSERT is
// for internal invariants: it also throws (never aborts), with the file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "core/source_location.h"

namespace tide {

// Every error tide throws. what() is "[op] message", followed for asynchronous failures
// by " (queued at file:line)".
class Error : public std::runtime_error {
 public:
  Error(std::string op, std::string message)
      : std::runtime_error("[" + op + "] " + message), op_(std::move(op)) {}
  Error(std::string op, std::string message, std::string full)
      : std::runtime_error(std::move(full)), op_(std::move(op)) {
    (void)message;
  }
  // The op named in the error ("matmul", "alloc", ...).
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}
[[noreturn]] void throw_assert(const char* cond, const std::string& msg, tide::SourceLocation loc);
}  // namespace detail

}  // namespace tide

// User error: throws tide::Error("[op] ...") when cond is false. Message parts are streamed.
#define TIDE_CHECK(cond, op, ...)                                     \
  do {                                                                \
    if (!(cond)) [[unlikely]]                                         \
      throw ::tide::Error((op), ::tide::detail::concat(__VA_ARGS__)); \
  } while (0)

// Internal invariant: throws tide::Error("[internal] ...") naming the condition and place.
#define TIDE_ASSERT(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) [[unlikely]]                                                  \
      ::tide::detail::throw_assert(#cond, ::tide::detail::concat(__VA_ARGS__), \
                                   ::tide::SourceLocation::current());         \
  } while (0)
