#include "core/engine/failure.h"

#include <cstring>

#include "core/error.h"

namespace tide {

namespace {
std::atomic<uint64_t> g_failure_order{0};

const char* short_file(const char* path) {
  const char* s = std::strrchr(path, '/');
  return s ? s + 1 : path;
}
}  // namespace

Failure* Failure::create(std::string op, std::string message, tide::SourceLocation site) {
  return new Failure(std::move(op), std::move(message), site,
                     g_failure_order.fetch_add(1, std::memory_order_relaxed));
}

std::string Failure::what() const {
  return "[" + op_ + "] " + message_ + " (queued at " + short_file(site_.file_name()) + ":" +
         std::to_string(site_.line()) + ")";
}

void Failure::rethrow() {
  mark_reported();
  throw Error(op_, message_, what());
}

namespace detail {
void throw_assert(const char* cond, const std::string& msg, tide::SourceLocation loc) {
  throw Error("internal", std::string("assertion failed: ") + cond + (msg.empty() ? "" : ": ") +
                              msg + " at " + short_file(loc.file_name()) + ":" +
                              std::to_string(loc.line()));
}
}  // namespace detail

std::string strip_op(std::string_view what, const char* op) {
  std::string prefix = std::string("[") + op + "] ";
  if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  return std::string(what);
}

}  // namespace tide
