// error_of(fn): the message of the tide::Error that fn throws. Shared by every suite; a
// call that throws something else, or nothing, fails the test and returns "".
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

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

}  // namespace tide::test_util
