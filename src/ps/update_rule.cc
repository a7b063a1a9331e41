// The step formulas of update_rule.h.
#include "ps/update_rule.h"

#include <algorithm>
#include <cmath>

#include "common/format.h"

namespace kolo::ps {
namespace {

template <typename T>
void sgd(const UpdateRule& r, T* p, const T* g, T* buf, std::size_t n) {
  const T lr = static_cast<T>(r.learning_rate), wd = static_cast<T>(r.weight_decay),
          m = static_cast<T>(r.momentum);
  for (std::size_t i = 0; i < n; ++i) {
    T d = g[i];
    if (r.weight_decay != 0) d = d + wd * p[i];
    if (r.momentum != 0) {
      buf[i] = m * buf[i] + d;
      d = r.nesterov ? d + m * buf[i] : buf[i];
    }
    p[i] = p[i] - lr * d;
  }
}

template <typename T>
void adam(const UpdateRule& r, std::int64_t t, T* p, const T* g, T* m1, T* m2, T* mx,
          std::size_t n) {
  const double bc1 = 1 - std::pow(r.beta_1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(r.beta_2, static_cast<double>(t));
  const T b1 = static_cast<T>(r.beta_1), c1 = static_cast<T>(1 - r.beta_1),
          b2 = static_cast<T>(r.beta_2), c2 = static_cast<T>(1 - r.beta_2),
          wd = static_cast<T>(r.weight_decay), eps = static_cast<T>(r.epsilon),
          sqrt_bc2 = static_cast<T>(std::sqrt(bc2)), step = static_cast<T>(r.learning_rate / bc1);
  for (std::size_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (r.weight_decay != 0) gi = gi + wd * p[i];
    m1[i] = m1[i] * b1 + c1 * gi;
    m2[i] = m2[i] * b2 + c2 * (gi * gi);
    T v = m2[i];
    if (r.amsgrad) {
      mx[i] = std::max(mx[i], m2[i]);
      v = mx[i];
    }
    const T denom = std::sqrt(v) / sqrt_bc2 + eps;
    p[i] = p[i] - step * (m1[i] / denom);
  }
}

template <typename T>
void rmsprop(const UpdateRule& r, T* p, const T* g, T* sq, T* buf, T* ga, std::size_t n) {
  const T rho = static_cast<T>(r.rho), c = static_cast<T>(1 - r.rho),
          wd = static_cast<T>(r.weight_decay), eps = static_cast<T>(r.epsilon),
          lr = static_cast<T>(r.learning_rate), m = static_cast<T>(r.momentum);
  for (std::size_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (r.weight_decay != 0) gi = gi + wd * p[i];
    sq[i] = sq[i] * rho + c * (gi * gi);
    T avg;
    if (r.centered) {
      ga[i] = ga[i] * rho + c * gi;
      avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
    } else {
      avg = std::sqrt(sq[i]) + eps;
    }
    if (r.momentum > 0) {
      buf[i] = buf[i] * m + gi / avg;
      p[i] = p[i] - lr * buf[i];
    } else {
      p[i] = p[i] - lr * (gi / avg);
    }
  }
}

template <typename T>
void apply_typed(const UpdateRule& r, std::int64_t t, T* p, const T* g, const std::vector<void*>& s,
                 std::size_t off, std::size_t n) {
  auto slot = [&](std::size_t k) { return static_cast<T*>(s[k]) + off; };
  switch (r.kind) {
    case UpdateRule::Kind::kSgd:
      sgd(r, p + off, g, slot(0), n);
      break;
    case UpdateRule::Kind::kAdam:
      adam(r, t, p + off, g, slot(0), slot(1), slot(2), n);
      break;
    case UpdateRule::Kind::kRmsprop:
      rmsprop(r, p + off, g, slot(0), slot(1), slot(2), n);
      break;
  }
}

Status out_of_range(const char* what, double v, const char* range) {
  return InvalidArgument(std::string("update rule: ") + what + " " + number_string(v) +
                         " is out of range (" + range + ")");
}

}  // namespace

std::vector<std::string> slot_names(const UpdateRule& rule) {
  switch (rule.kind) {
    case UpdateRule::Kind::kSgd:
      return {"momentum_buffer"};
    case UpdateRule::Kind::kAdam:
      return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    case UpdateRule::Kind::kRmsprop:
      return {"square_avg", "momentum_buffer", "grad_avg"};
  }
  return {};
}

Status check_rule(const UpdateRule& r) {
  if (r.kind != UpdateRule::Kind::kSgd && r.kind != UpdateRule::Kind::kAdam &&
      r.kind != UpdateRule::Kind::kRmsprop) {
    return InvalidArgument("update rule: unknown kind " + std::to_string(static_cast<int>(r.kind)));
  }
  if (!(r.learning_rate >= 0)) return out_of_range("learning rate", r.learning_rate, ">= 0");
  if (!(r.momentum >= 0)) return out_of_range("momentum", r.momentum, ">= 0");
  if (!(r.weight_decay >= 0)) return out_of_range("weight decay", r.weight_decay, ">= 0");
  if (!(r.epsilon >= 0)) return out_of_range("epsilon", r.epsilon, ">= 0");
  if (!(r.beta_1 >= 0 && r.beta_1 < 1)) return out_of_range("beta_1", r.beta_1, "[0, 1)");
  if (!(r.beta_2 >= 0 && r.beta_2 < 1)) return out_of_range("beta_2", r.beta_2, "[0, 1)");
  if (!(r.rho >= 0 && r.rho < 1)) return out_of_range("rho", r.rho, "[0, 1)");
  if (r.nesterov && !(r.momentum > 0)) {
    return InvalidArgument("update rule: nesterov needs a momentum > 0 (libtorch's rule)");
  }
  return Status::OK();
}

void apply_update(const UpdateRule& rule, DataType dtype, std::int64_t t, void* values,
                  const void* grad, const std::vector<void*>& slots, std::size_t offset,
                  std::size_t count) {
  if (dtype == DataType::kFloat64) {
    apply_typed(rule, t, static_cast<double*>(values), static_cast<const double*>(grad), slots,
                offset, count);
  } else {
    apply_typed(rule, t, static_cast<float*>(values), static_cast<const float*>(grad), slots,
                offset, count);
  }
}

void apply_update_rows(const UpdateRule& rule, DataType dtype, std::int64_t t, void* values,
                       const void* grad, const std::vector<void*>& slots,
                       const std::vector<std::int64_t>& rows, std::size_t row_elems) {
  const std::size_t esize = dtype_size(dtype);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const void* g = static_cast<const char*>(grad) + i * row_elems * esize;
    apply_update(rule, dtype, t, values, g, slots, static_cast<std::size_t>(rows[i]) * row_elems,
                 row_elems);
  }
}

}  // namespace kolo::ps
