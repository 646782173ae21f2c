// tide::SourceLocation: std::source_location where the standard library has it, otherwise
// a class with the same members built on the compiler builtins behind it.
// Why: libstdc++'s <source_location> needs __builtin_source_location, which Clang has only
// from version 15, so with Clang 14 (Debian 12's clang) and libstdc++ std::source_location
// does not exist. __builtin_FILE and its siblings are in GCC and in Clang since 9; as
// default arguments of current() they name the caller, as std::source_location does.
// Not done here: anything beyond the standard class's four accessors.
#pragma once

#include <cstdint>
#include <source_location>

namespace tide {

#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#else
class SourceLocation {
 public:
  static constexpr SourceLocation current(
      const char* file = __builtin_FILE(), const char* function = __builtin_FUNCTION(),
      std::uint_least32_t line = __builtin_LINE(),
      std::uint_least32_t column = __builtin_COLUMN()) noexcept {
    SourceLocation s;
    s.file_ = file;
    s.function_ = function;
    s.line_ = line;
    s.column_ = column;
    return s;
  }
  constexpr SourceLocation() noexcept = default;
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return column_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
  std::uint_least32_t column_ = 0;
};
#endif

}  // namespace tide
