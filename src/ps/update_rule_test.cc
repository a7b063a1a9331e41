// The update rules' checks and slots (their formulas are checked against libtorch in
// update_rule_torch_test.cc).
#include "ps/update_rule.h"

#include <gtest/gtest.h>

namespace kolo::ps {
namespace {

TEST(UpdateRuleTest, SlotsOfEachRule) {
  EXPECT_EQ(slot_names({.kind = UpdateRule::Kind::kSgd}),
            std::vector<std::string>{"momentum_buffer"});
  EXPECT_EQ(slot_names({.kind = UpdateRule::Kind::kAdam}),
            (std::vector<std::string>{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}));
  EXPECT_EQ(slot_names({.kind = UpdateRule::Kind::kRmsprop}),
            (std::vector<std::string>{"square_avg", "momentum_buffer", "grad_avg"}));
}

TEST(UpdateRuleTest, OutOfRangeHyperparametersAreNamed) {
  struct Bad {
    UpdateRule rule;
    const char* says;
  };
  const Bad bad[] = {
      {{.learning_rate = -1}, "learning rate -1"},
      {{.momentum = -0.5}, "momentum -0.5"},
      {{.nesterov = true}, "nesterov needs a momentum > 0"},
      {{.weight_decay = -1}, "weight decay -1"},
      {{.kind = UpdateRule::Kind::kAdam, .beta_1 = 1}, "beta_1 1"},
      {{.kind = UpdateRule::Kind::kAdam, .beta_2 = 1.5}, "beta_2 1.5"},
      {{.kind = UpdateRule::Kind::kAdam, .epsilon = -1e-3}, "epsilon -0.001"},
      {{.kind = UpdateRule::Kind::kRmsprop, .rho = 1}, "rho 1"},
      {{.kind = static_cast<UpdateRule::Kind>(9)}, "unknown kind 9"},
  };
  for (const auto& b : bad) {
    const Status s = check_rule(b.rule);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << b.says;
    EXPECT_NE(s.message().find(b.says), std::string::npos) << s.message();
  }
  EXPECT_TRUE(check_rule(UpdateRule{}).ok());
}

TEST(UpdateRuleTest, RowsUpdateOnlyTheirRowsAndSlots) {
  // Adam on 4 rows of 2; row 2 only. Other rows' values and moments stay as they were.
  UpdateRule r{.kind = UpdateRule::Kind::kAdam, .learning_rate = 0.1};
  std::vector<float> v{1, 2, 3, 4, 5, 6, 7, 8}, m1(8, 0.5f), m2(8, 0.25f), mx(8, 0);
  const std::vector<float> g{1, -1};
  apply_update_rows(r, DataType::kFloat32, 3, v.data(), g.data(), {m1.data(), m2.data(), mx.data()},
                    {2}, 2);
  for (int i : {0, 1, 2, 3, 6, 7}) {
    EXPECT_EQ(v[i], static_cast<float>(i + 1)) << i;
    EXPECT_EQ(m1[i], 0.5f) << i;
    EXPECT_EQ(m2[i], 0.25f) << i;
  }
  EXPECT_NE(v[4], 5.0f);
  EXPECT_FLOAT_EQ(m1[4], 0.9f * 0.5f + 0.1f * 1);
  EXPECT_FLOAT_EQ(m1[5], 0.9f * 0.5f - 0.1f);
}

}  // namespace
}  // namespace kolo::ps
