// Logs: the named scalar values that fit/evaluate/predict hand to callbacks ("loss",
// "accuracy", "val_loss", "lr", ...), in the order they were first set, as Keras's logs
// dict. Part of <kolo/train.h>.
//
// Not for: anything but scalars (weights and tensors go through TrainingHost).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kolo::train {

class Logs {
 public:
  Logs() = default;
  Logs(std::initializer_list<std::pair<std::string, double>> items) {
    for (const auto& [k, v] : items) set(k, v);
  }
  // Sets (or replaces, keeping its place) the value of `name`.
  void set(const std::string& name, double value) {
    for (auto& item : items_) {
      if (item.first == name) {
        item.second = value;
        return;
      }
    }
    items_.emplace_back(name, value);
  }
  std::optional<double> get(const std::string& name) const {
    for (const auto& item : items_) {
      if (item.first == name) return item.second;
    }
    return std::nullopt;
  }
  bool contains(const std::string& name) const { return get(name).has_value(); }
  void erase(const std::string& name) {
    for (auto it = items_.begin(); it != items_.end(); ++it) {
      if (it->first == name) {
        items_.erase(it);
        return;
      }
    }
  }
  bool empty() const { return items_.empty(); }
  std::size_t size() const { return items_.size(); }
  const std::vector<std::pair<std::string, double>>& items() const { return items_; }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  bool operator==(const Logs&) const = default;

 private:
  std::vector<std::pair<std::string, double>> items_;
};

}  // namespace kolo::train
