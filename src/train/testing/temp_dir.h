// Test helper: a gtest fixture with a fresh directory per test, named after the process
// and the test (so parallel ctest processes never share one), removed after the test.
// For kolo_train's tests that write files (event files, checkpoints).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kolo::testing {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (std::filesystem::temp_directory_path() /
            ("kolo_" + std::string(test->test_suite_name()) + "_" + test->name() + "_" +
             std::to_string(getpid())))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Not created: code under test is expected to make it (and its parents).
  std::string dir_;
};

}  // namespace kolo::testing
