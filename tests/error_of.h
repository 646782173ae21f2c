// error_of(fn): the message of the tide::Error that fn throws. Shared by every suite; a
// call that throws something else, or nothing, fails the test and returns "".
// EXPECT_TIDE_ERROR(stmt, parts...): stmt throws tide::Error at the call with every part in
// its message.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tide::test_util {

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tide::Error, got std::exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected tide::Error, nothing was thrown";
  return "";
}

// Adds a failure unless `what` contains every part.
inline void expect_contains(std::string_view what, std::initializer_list<std::string_view> parts,
                            const char* stmt) {
  for (std::string_view p : parts)
    EXPECT_NE(what.find(p), std::string_view::npos)
        << stmt << ": the error \"" << what << "\" does not contain \"" << p << "\"";
}

}  // namespace tide::test_util

// Expects `stmt` to throw tide::Error at the call (not at a later sync) with every listed
// substring in what(), e.g. EXPECT_TIDE_ERROR(add(a, b), "[add]", "(2, 3)", "(4,)").
#define EXPECT_TIDE_ERROR(stmt, ...)                                       \
  do {                                                                     \
    try {                                                                  \
      (void)(stmt);                                                        \
      ADD_FAILURE() << "expected tide::Error from: " #stmt;                \
    } catch (const ::tide::Error& e_) {                                    \
      ::tide::test_util::expect_contains(e_.what(), {__VA_ARGS__}, #stmt); \
    } catch (const std::exception& e_) {                                   \
      ADD_FAILURE() << #stmt " threw a non-tide exception: " << e_.what(); \
    }                                                                      \
  } while (0)
