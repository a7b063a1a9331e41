// The optimizer steps a ps task applies to its shards: libtorch 1.13's
// torch::optim::SGD, Adam and RMSprop formulas (the ones kolo_train's compile() makes),
// on float32 or float64 memory, for the whole shard or for some of its rows.
//
// Each rule keeps named slots (arrays of the shard's size and dtype, zero at creation,
// which equals libtorch's lazily made state for every formula here) and a step count t
// (updates applied to the shard). Per element, with g the gradient and p the value:
//   SGD      d = g + wd p; with momentum: b = m b + d (dampening 0), d = nesterov ? d + m b : b;
//            p -= lr d                                          slot: momentum_buffer
//   Adam     g += wd p; m1 = b1 m1 + (1-b1) g; m2 = b2 m2 + (1-b2) g^2;
//            amsgrad: mx = max(mx, m2), v = mx, else v = m2;
//            p -= lr / (1-b1^t) * m1 / (sqrt(v) / sqrt(1-b2^t) + eps)
//                                             slots: exp_avg, exp_avg_sq, max_exp_avg_sq
//   RMSprop  g += wd p; s = rho s + (1-rho) g^2; centered: a = rho a + (1-rho) g,
//            d = sqrt(s - a^2) + eps, else d = sqrt(s) + eps;
//            momentum: b = m b + g / d, p -= lr b; else p -= lr g / d
//                                             slots: square_avg, momentum_buffer, grad_avg
// Scalars are rounded to the element type before use, as ATen's CPU kernels do, so a
// float32 step agrees with libtorch's to a few ulps (update_rule_torch_test.cc).
// Row updates touch only the pushed rows' values and slots (lazy, as SparseAdam): rows
// not pushed keep their moments undecayed; t still counts every update of the shard.
//
// Not for: shards, versions, synchronous aggregation (ps_service.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "ps/ps_service.h"

namespace kolo::ps {

// The slots `rule` keeps, in the order apply_update takes them.
std::vector<std::string> slot_names(const UpdateRule& rule);

// kInvalidArgument naming the hyperparameter and its value when out of libtorch's ranges
// (learning rate >= 0, momentum >= 0, betas in [0, 1), epsilon >= 0, rho in [0, 1),
// weight decay >= 0, nesterov only with momentum > 0).
Status check_rule(const UpdateRule& rule);

// One step of `rule` over `count` elements starting at element `offset` of `values` and
// each slot, with `grad` holding those `count` elements' gradients. `t` is the step count
// including this step (>= 1). dtype: float32 or float64.
void apply_update(const UpdateRule& rule, DataType dtype, std::int64_t t, void* values,
                  const void* grad, const std::vector<void*>& slots, std::size_t offset,
                  std::size_t count);

// The same for `rows` (shard-local, each < the shard's rows, unique) of `row_elems`
// elements each; grad holds rows.size() x row_elems elements in the order of `rows`.
void apply_update_rows(const UpdateRule& rule, DataType dtype, std::int64_t t, void* values,
                       const void* grad, const std::vector<void*>& slots,
                       const std::vector<std::int64_t>& rows, std::size_t row_elems);

}  // namespace kolo::ps
