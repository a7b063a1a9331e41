// Test helper for the losses' and metrics' tests (losses_test.cc, metrics_test.cc): small
// tensors from literals, a closeness check that prints both tensors, and the message of a
// kolo::Error(kInvalidArgument) a call must throw.
//
// Not for: anything but tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kolo/error.h"

namespace kolo::train::testing {

inline torch::Tensor floats(std::vector<float> v, std::vector<int64_t> shape) {
  return torch::tensor(v, torch::kFloat).reshape(shape);
}

inline torch::Tensor longs(std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); }

inline void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), want.to(torch::kDouble), tol, tol))
      << "got\n"
      << got << "\nwant\n"
      << want;
}

// The error message of `fn`, which must throw kolo::Error(kInvalidArgument).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no kolo::Error was thrown";
  return "";
}

}  // namespace kolo::train::testing
