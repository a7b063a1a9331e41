// PsClient: batched calls to every ps task of the job (ps_service.h; the methods' fields:
// ps_service_wire.h). A batch is grouped by ps task into one request each; the requests
// are in flight together (one thread per extra ps task) and the call waits for all.
#include <atomic>
#include <cstring>
#include <thread>

#include "common/format.h"
#include "ps/ps_service.h"
#include "ps/ps_service_wire.h"
#include "ps/wire.h"

namespace kolo::ps {

struct PsClient::Impl {
  PsClientOptions options;
  std::vector<std::unique_ptr<RpcClient>> clients;
  std::atomic<std::uint64_t> push_bytes{0};

  Status check_task(int t, const std::string& what) const {
    if (t < 0 || t >= static_cast<int>(clients.size())) {
      return InvalidArgument(what + " names ps task " + std::to_string(t) + "; the job has " +
                             std::to_string(clients.size()) + " ps tasks");
    }
    return Status::OK();
  }
  Status call(int t, const Message& req, Message* reply, Deadline deadline) {
    return clients[static_cast<std::size_t>(t)]->call(req, reply, deadline);
  }
  // Runs fn(task) for every task in `tasks` at once; the first error (in task order).
  template <typename Fn>
  Status for_tasks(const std::vector<int>& tasks, Fn fn) {
    std::vector<Status> results(tasks.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < tasks.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = fn(tasks[i]); });
    }
    if (!tasks.empty()) results[0] = fn(tasks[0]);
    for (auto& t : threads) t.join();
    for (auto& s : results) {
      if (!s.ok()) return s;
    }
    return Status::OK();
  }
};

namespace {

std::string shard_text(const ShardInfo& s) {
  return "variable '" + s.variable + "' shard " + std::to_string(s.shard);
}

void set_shard(Fields& f, const std::string& prefix, const ShardInfo& s) {
  f.set(prefix + "variable", s.variable);
  f.set(prefix + "shard", static_cast<std::int64_t>(s.shard));
}

std::string rows_blob(const std::vector<std::int64_t>& rows) {
  std::string b(rows.size() * 8, '\0');
  if (!rows.empty()) std::memcpy(b.data(), rows.data(), b.size());
  return b;
}

}  // namespace

PsClient::PsClient(PsClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const auto& o = impl_->options;
  for (std::size_t i = 0; i < o.endpoints.size(); ++i) {
    const std::string name =
        i < o.names.size() ? o.names[i] : "/job:ps/replica:0/task:" + std::to_string(i);
    impl_->clients.push_back(std::make_unique<RpcClient>(RpcClientOptions{
        .endpoint = o.endpoints[i], .secret = o.secret, .peer = name, .self = o.self}));
  }
}
PsClient::~PsClient() = default;

int PsClient::num_ps() const { return static_cast<int>(impl_->clients.size()); }
const std::string& PsClient::ps_name(int ps_task) const {
  return impl_->clients.at(static_cast<std::size_t>(ps_task))->options().peer;
}

Status PsClient::create(const ShardInfo& shard, const void* initial, const UpdateRule& rule,
                        int replicas_to_aggregate, bool* existed, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(impl_->check_task(shard.ps_task, shard_text(shard)));
  if (initial == nullptr)
    return InvalidArgument("create: no initial values for " + shard_text(shard));
  Message req{wire::kCreate};
  Fields& f = req.fields;
  set_shard(f, "", shard);
  f.set("dtype", static_cast<std::int64_t>(shard.dtype));
  f.set("row_begin", shard.row_begin);
  f.set("ndim", static_cast<std::int64_t>(shard.shape.size()));
  for (std::size_t k = 0; k < shard.shape.size(); ++k)
    f.set("dim." + std::to_string(k), shard.shape[k]);
  f.set("replicas", static_cast<std::int64_t>(replicas_to_aggregate));
  f.set("rule.kind", static_cast<std::int64_t>(rule.kind));
  f.set("rule.learning_rate", rule.learning_rate);
  f.set("rule.momentum", rule.momentum);
  f.set("rule.nesterov", std::int64_t{rule.nesterov});
  f.set("rule.weight_decay", rule.weight_decay);
  f.set("rule.beta_1", rule.beta_1);
  f.set("rule.beta_2", rule.beta_2);
  f.set("rule.epsilon", rule.epsilon);
  f.set("rule.amsgrad", std::int64_t{rule.amsgrad});
  f.set("rule.rho", rule.rho);
  f.set("rule.centered", std::int64_t{rule.centered});
  req.blobs.emplace_back(static_cast<const char*>(initial), shard.bytes());
  Message reply;
  KOLO_RETURN_IF_ERROR(impl_->call(shard.ps_task, req, &reply, deadline));
  std::int64_t e = 0;
  KOLO_RETURN_IF_ERROR(reply.fields.get("existed", &e));
  if (existed != nullptr) *existed = e != 0;
  return Status::OK();
}

Status PsClient::pull(std::vector<Pull>& pulls, Deadline deadline) {
  std::map<int, std::vector<std::size_t>> by_task;
  for (std::size_t i = 0; i < pulls.size(); ++i) {
    const Pull& p = pulls[i];
    if (p.shard == nullptr)
      return InvalidArgument("pull: item " + std::to_string(i) + " has no shard");
    KOLO_RETURN_IF_ERROR(impl_->check_task(p.shard->ps_task, "pull: " + shard_text(*p.shard)));
    if (p.out == nullptr && (p.whole || !p.rows.empty())) {
      return InvalidArgument("pull: no output buffer for " + shard_text(*p.shard));
    }
    by_task[p.shard->ps_task].push_back(i);
  }
  std::vector<int> tasks;
  for (const auto& [t, items] : by_task) tasks.push_back(t);
  return impl_->for_tasks(tasks, [&](int t) -> Status {
    const auto& items = by_task[t];
    Message req{wire::kPull};
    req.fields.set(wire::kItemCount, static_cast<std::int64_t>(items.size()));
    for (std::size_t j = 0; j < items.size(); ++j) {
      const Pull& p = pulls[items[j]];
      set_shard(req.fields, wire::item(j, ""), *p.shard);
      req.fields.set(wire::item(j, wire::kWhole), std::int64_t{p.whole});
      req.fields.set(wire::item(j, "min_version"), p.min_version);
      req.blobs.push_back(p.whole ? std::string() : rows_blob(p.rows));
    }
    Message reply;
    KOLO_RETURN_IF_ERROR(impl_->call(t, req, &reply, deadline));
    if (reply.blobs.size() != items.size()) {
      return Internal("pull: ps task " + ps_name(t) + " answered " +
                      std::to_string(reply.blobs.size()) + " blobs for " +
                      std::to_string(items.size()) + " items");
    }
    for (std::size_t j = 0; j < items.size(); ++j) {
      Pull& p = pulls[items[j]];
      const std::size_t want = p.whole ? p.shard->bytes() : p.rows.size() * p.shard->row_bytes();
      if (reply.blobs[j].size() != want) {
        return Mismatch("pull: ps task " + ps_name(t) + " sent " +
                        std::to_string(reply.blobs[j].size()) + " bytes for " +
                        shard_text(*p.shard) + ", this process expects " + std::to_string(want) +
                        " (do the chief and this process build the same model?)");
      }
      KOLO_RETURN_IF_ERROR(reply.fields.get(wire::item(j, wire::kVersion), &p.version));
      if (want != 0) std::memcpy(p.out, reply.blobs[j].data(), want);
    }
    return Status::OK();
  });
}

Status PsClient::push(std::vector<Push>& pushes, Deadline deadline) {
  std::map<int, std::vector<std::size_t>> by_task;
  for (std::size_t i = 0; i < pushes.size(); ++i) {
    const Push& p = pushes[i];
    if (p.shard == nullptr)
      return InvalidArgument("push: item " + std::to_string(i) + " has no shard");
    KOLO_RETURN_IF_ERROR(impl_->check_task(p.shard->ps_task, "push: " + shard_text(*p.shard)));
    if (p.grad == nullptr && (p.whole || !p.rows.empty())) {
      return InvalidArgument("push: no gradient for " + shard_text(*p.shard));
    }
    by_task[p.shard->ps_task].push_back(i);
  }
  std::vector<int> tasks;
  for (const auto& [t, items] : by_task) tasks.push_back(t);
  return impl_->for_tasks(tasks, [&](int t) -> Status {
    const auto& items = by_task[t];
    Message req{wire::kPush};
    req.fields.set(wire::kItemCount, static_cast<std::int64_t>(items.size()));
    for (std::size_t j = 0; j < items.size(); ++j) {
      const Push& p = pushes[items[j]];
      set_shard(req.fields, wire::item(j, ""), *p.shard);
      req.fields.set(wire::item(j, wire::kWhole), std::int64_t{p.whole});
      req.fields.set(wire::item(j, wire::kVersion), p.version);
      req.blobs.push_back(p.whole ? std::string() : rows_blob(p.rows));
      const std::size_t n = p.whole ? p.shard->bytes() : p.rows.size() * p.shard->row_bytes();
      req.blobs.emplace_back(static_cast<const char*>(p.grad), n);
    }
    impl_->push_bytes.fetch_add(wire_bytes(req));
    Message reply;
    KOLO_RETURN_IF_ERROR(impl_->call(t, req, &reply, deadline));
    for (std::size_t j = 0; j < items.size(); ++j) {
      std::int64_t a = 0;
      KOLO_RETURN_IF_ERROR(reply.fields.get(wire::item(j, "accepted"), &a));
      pushes[items[j]].accepted = a != 0;
    }
    return Status::OK();
  });
}

Status PsClient::set_learning_rate(double learning_rate, Deadline deadline) {
  std::vector<int> tasks;
  for (int t = 0; t < num_ps(); ++t) tasks.push_back(t);
  return impl_->for_tasks(tasks, [&](int t) {
    Message req{wire::kSetLearningRate}, reply;
    req.fields.set("learning_rate", learning_rate);
    return impl_->call(t, req, &reply, deadline);
  });
}

Status PsClient::read_state(const ShardInfo& shard, ShardState* out, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(impl_->check_task(shard.ps_task, "read_state: " + shard_text(shard)));
  Message req{wire::kReadState}, reply;
  set_shard(req.fields, "", shard);
  KOLO_RETURN_IF_ERROR(impl_->call(shard.ps_task, req, &reply, deadline));
  ShardState s;
  std::int64_t nslots = 0;
  KOLO_RETURN_IF_ERROR(reply.fields.get("step", &s.step));
  KOLO_RETURN_IF_ERROR(reply.fields.get(wire::kVersion, &s.version));
  KOLO_RETURN_IF_ERROR(reply.fields.get("slots", &nslots));
  if (nslots < 0 || static_cast<std::size_t>(nslots) + 1 != reply.blobs.size()) {
    return Internal("read_state: ps task " + ps_name(shard.ps_task) + " answered " +
                    std::to_string(reply.blobs.size()) + " blobs for " + std::to_string(nslots) +
                    " slots of " + shard_text(shard));
  }
  s.values = std::move(reply.blobs[0]);
  for (std::int64_t k = 0; k < nslots; ++k) {
    std::string name;
    KOLO_RETURN_IF_ERROR(reply.fields.get("slot." + std::to_string(k), &name));
    s.slots.emplace_back(std::move(name), std::move(reply.blobs[static_cast<std::size_t>(k) + 1]));
  }
  *out = std::move(s);
  return Status::OK();
}

Status PsClient::assign_state(const ShardInfo& shard, const ShardState& state, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(impl_->check_task(shard.ps_task, "assign_state: " + shard_text(shard)));
  Message req{wire::kAssignState}, reply;
  set_shard(req.fields, "", shard);
  req.fields.set("step", state.step).set(wire::kVersion, state.version);
  req.fields.set("slots", static_cast<std::int64_t>(state.slots.size()));
  req.blobs.push_back(state.values);
  for (std::size_t k = 0; k < state.slots.size(); ++k) {
    req.fields.set("slot." + std::to_string(k), state.slots[k].first);
    req.blobs.push_back(state.slots[k].second);
  }
  return impl_->call(shard.ps_task, req, &reply, deadline);
}

Status PsClient::ping(int ps_task, Deadline deadline) {
  KOLO_RETURN_IF_ERROR(impl_->check_task(ps_task, "ping"));
  Message req{wire::kPing}, reply;
  return impl_->call(ps_task, req, &reply, deadline);
}

std::uint64_t PsClient::push_bytes_sent() const { return impl_->push_bytes.load(); }

}  // namespace kolo::ps
