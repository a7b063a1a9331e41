// Test helper for the callbacks' tests (callbacks_test.cc, distributed_callbacks_test.cc):
// fit's parameters, logs that follow a series per epoch, "training" that sets the fake
// host's weights to the epoch, and a fixture with a fresh directory per test for the
// callbacks that write files. Drives callbacks through FakeHost and drive_fit
// (fake_host.h).
//
// Not for: anything but tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kolo/train/callback.h"
#include "train/testing/fake_host.h"

namespace kolo::train::testing {

inline TrainParams params_for(int epochs, std::int64_t steps = 2) {
  TrainParams p;
  p.epochs = epochs;
  p.steps = steps;
  return p;
}

// Each epoch's logs: `name` = values[epoch].
inline std::function<EpochLogs(int)> series(const std::string& name, std::vector<double> values) {
  return [name, values](int epoch) {
    return EpochLogs{Logs{{"loss", 1.0}, {name, values.at(epoch)}}, {}};
  };
}

// "Training" that leaves epoch e's weights all equal to e.
inline auto weights_follow_epoch(FakeHost& host) {
  return [&host](int epoch, int) { host.set_weights_to(static_cast<float>(epoch)); };
}

// A fresh directory per test (named after the process and the test), removed after it.
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kolo_callbacks_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace kolo::train::testing
