// Broadcasts of model parameters, optimizer state and arbitrary objects from one root,
// and allgather of objects. Objects travel as bytes: a size broadcast/allgather, then
// the bytes as a uint8 tensor. Not for: gradient averaging (distributed_optimizer.cc).
#include <cstring>
#include <optional>
#include <sstream>

#include "kolo/torch.h"

namespace kolo {
namespace {

std::string object_name(const std::string& name, const char* kind) {
  return name.empty() ? "" : std::string(kind) + "." + name;
}

}  // namespace

void broadcast_parameters(const NamedTensors& named_parameters, int root) {
  torch::NoGradGuard no_grad;
  std::vector<TorchHandle> handles;
  for (const auto& item : named_parameters) {
    torch::Tensor p = item.value();
    BroadcastOptions o;
    o.name = "broadcast.parameter." + item.key();
    o.root = root;
    handles.push_back(broadcast_async_(p, o));
  }
  for (auto& h : handles) h.wait();
}

std::string broadcast_object(const std::string& bytes, int root, const std::string& name,
                             int process_set) {
  const bool is_root = kolo::rank() == root;
  torch::Tensor size =
      torch::tensor({static_cast<int64_t>(is_root ? bytes.size() : 0)}, torch::kLong);
  BroadcastOptions o;
  o.root = root;
  o.process_set = process_set;
  o.name = object_name(name, "broadcast_object.size");
  broadcast_(size, o);
  torch::Tensor data = torch::empty({size.item<int64_t>()}, torch::kByte);
  if (is_root && !bytes.empty()) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  o.name = object_name(name, "broadcast_object.bytes");
  broadcast_(data, o);
  return std::string(static_cast<const char*>(data.data_ptr()),
                     static_cast<std::size_t>(data.numel()));
}

std::vector<std::string> allgather_object(const std::string& bytes, const std::string& name,
                                          int process_set) {
  AllgatherOptions o;
  o.process_set = process_set;
  o.name = object_name(name, "allgather_object.size");
  torch::Tensor sizes =
      allgather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong), o);
  torch::Tensor mine = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kByte);
  if (!bytes.empty()) std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  o.name = object_name(name, "allgather_object.bytes");
  torch::Tensor all = allgather(mine, o);
  std::vector<std::string> out;
  const auto* p = static_cast<const char*>(all.data_ptr());
  for (int64_t i = 0; i < sizes.numel(); ++i) {
    const auto n = static_cast<std::size_t>(sizes[i].item<int64_t>());
    out.emplace_back(p, n);
    p += n;
  }
  return out;
}

namespace {
std::string pickle(const torch::IValue& v) {
  std::vector<char> bytes = torch::pickle_save(v);
  return std::string(bytes.begin(), bytes.end());
}
torch::IValue unpickle(const std::string& s) {
  return torch::pickle_load(std::vector<char>(s.begin(), s.end()));
}
}  // namespace

torch::IValue broadcast_object(const torch::IValue& value, int root, const std::string& name,
                               int process_set) {
  return unpickle(broadcast_object(kolo::rank() == root ? pickle(value) : std::string(), root, name,
                                   process_set));
}

std::vector<torch::IValue> allgather_object(const torch::IValue& value, const std::string& name,
                                            int process_set) {
  std::vector<torch::IValue> out;
  for (const auto& s : allgather_object(pickle(value), name, process_set)) {
    out.push_back(unpickle(s));
  }
  return out;
}

namespace {

// Non-root ranks load the archive's tensors onto `device` (default: where root saved them).
template <typename Write, typename Read>
void broadcast_archive(int root, const std::string& name, Write write, Read read,
                       std::optional<torch::Device> device = std::nullopt) {
  std::string bytes;
  if (kolo::rank() == root) {
    torch::serialize::OutputArchive archive;
    write(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  bytes = broadcast_object(bytes, root, name);
  if (kolo::rank() != root) {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    if (device)
      archive.load_from(in, *device);
    else
      archive.load_from(in);
    read(archive);
  }
}

}  // namespace

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root) {
  // A DistributedOptimizer holds no state of its own: the wrapped optimizer's is meant,
  // and its copies of the options follow.
  if (auto* d = dynamic_cast<DistributedOptimizer*>(&optimizer)) {
    d->share_options();
    broadcast_optimizer_state(d->optimizer(), root);
    d->share_options();
    return;
  }
  // libtorch's optimizer serialization carries the state tensors (step counts, moments);
  // loading it does not replace the groups' options, so they travel separately. Loading
  // only adds state, so a rank's own state goes first (root may have none yet), and the
  // tensors land on this rank's parameter device (root's GPU is not this rank's).
  std::optional<torch::Device> device;
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) {
      device = group.params().front().device();
      break;
    }
  }
  broadcast_archive(
      root, "optimizer_state", [&](auto& a) { optimizer.save(a); },
      [&](auto& a) {
        optimizer.state().clear();
        optimizer.load(a);
      },
      device);
  auto& groups = optimizer.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    broadcast_archive(
        root, "optimizer_options." + std::to_string(i),
        [&](auto& a) { groups[i].options().serialize(a); },
        [&](auto& a) { groups[i].options().serialize(a); });
  }
}

}  // namespace kolo
