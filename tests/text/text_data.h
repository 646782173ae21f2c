// Where the text suites find the files of scripts/fetch_text_data.sh: $TIDE_TEXT_DATA when
// set, else .data/text of the source tree (TIDE_TEXT_DATA_DIR, set by tests/CMakeLists.txt).
// Tests that need them call TIDE_REQUIRE_TEXT_DATA, which skips with the command to run.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tide::test_util {

inline std::string text_data_dir() {
  if (const char* env = std::getenv("TIDE_TEXT_DATA"); env && *env) return env;
  return TIDE_TEXT_DATA_DIR;
}

// The path of `file` under the data folder, or "" when it is not there.
inline std::string text_data_file(const std::string& file) {
  const std::string path = text_data_dir() + "/" + file;
  return std::filesystem::is_regular_file(path) ? path : "";
}

}  // namespace tide::test_util

// Declares `var`, the path of `file` in the data folder; skips the test when it is absent.
#define TIDE_REQUIRE_TEXT_DATA(var, file)                                                  \
  const std::string var = ::tide::test_util::text_data_file(file);                         \
  if (var.empty())                                                                         \
  GTEST_SKIP() << (file) << " is not in " << ::tide::test_util::text_data_dir()            \
               << ": run 'bash scripts/fetch_text_data.sh' (or set TIDE_TEXT_DATA to the " \
                  "folder that has it)"
