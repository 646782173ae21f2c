// Tiny IDX files for the train suite's tests: the bytes of an images and a labels file,
// and a fixture with a fresh directory per test to write them in.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tide::test_util {

inline void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

// n images of rows x cols: pixel (e, k) of example e is (7*e + k) % 256.
inline std::vector<uint8_t> images_bytes(uint32_t n, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> b;
  put_be32(b, 0x803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t e = 0; e < n; ++e)
    for (uint32_t k = 0; k < rows * cols; ++k) b.push_back(uint8_t((7 * e + k) % 256));
  return b;
}

// n labels: example e has label e % 10 (its byte is at kLabelsHeader + e).
inline constexpr size_t kLabelsHeader = 8;
inline std::vector<uint8_t> labels_bytes(uint32_t n) {
  std::vector<uint8_t> b;
  put_be32(b, 0x801);
  put_be32(b, n);
  for (uint32_t e = 0; e < n; ++e) b.push_back(uint8_t(e % 10));
  return b;
}

// A fresh directory per test (removed afterwards) and write(name, bytes) into it.
class IdxFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        std::filesystem::temp_directory_path() / ("tide_idx_" + std::to_string(::getpid()) + "_" +
                                                  info->test_suite_name() + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path;
  }

  std::filesystem::path dir_;
};

}  // namespace tide::test_util
