// PsService: the shards of one ps task and the methods that pull, push and checkpoint
// them (ps_service.h; the methods' fields: ps_service_wire.h).
//
// Locking: the shard table is under a shared mutex (create adds, everything else looks
// up); each shard's values, slots, version and synchronous accumulator are under that
// shard's own mutex, so pushes to different shards run in parallel on the server's
// handler threads. A pull waiting for a version waits on its shard's condition variable
// until its deadline or shutdown().
#include "ps/ps_service.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "common/format.h"
#include "ps/ps_service_wire.h"
#include "ps/update_rule.h"

namespace kolo::ps {

std::size_t ShardInfo::row_bytes() const {
  std::size_t n = dtype_size(dtype);
  for (std::size_t i = 1; i < shape.size(); ++i) n *= static_cast<std::size_t>(shape[i]);
  return n;
}
std::size_t ShardInfo::bytes() const {
  return shape.empty() ? dtype_size(dtype) : row_bytes() * static_cast<std::size_t>(shape[0]);
}

namespace {

struct Shard {
  ShardInfo info;
  UpdateRule rule;
  int replicas = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::string values;              // guarded by mu
  std::vector<std::string> slots;  // guarded by mu; slot_names(rule) order
  std::int64_t step = 0;           // guarded by mu
  std::int64_t version = 0;        // guarded by mu
  // Synchronous mode: the sum of this version's pushes so far (guarded by mu).
  std::string acc;
  std::int64_t acc_count = 0;
  bool acc_dense = false;
  std::vector<char> acc_touched;  // per row, for row pushes

  std::size_t elems() const { return info.bytes() / dtype_size(info.dtype); }
  std::size_t rows() const {
    return info.shape.empty() ? 1 : static_cast<std::size_t>(info.shape[0]);
  }
  std::vector<void*> slot_ptrs() {
    std::vector<void*> p;
    for (auto& s : slots) p.push_back(s.data());
    return p;
  }
};

template <typename T>
void add_scaled(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}
void add_into(DataType dtype, void* dst, const void* src, std::size_t n) {
  if (dtype == DataType::kFloat64) {
    add_scaled(static_cast<double*>(dst), static_cast<const double*>(src), n);
  } else {
    add_scaled(static_cast<float*>(dst), static_cast<const float*>(src), n);
  }
}
template <typename T>
void div_by(T* p, std::size_t n, std::int64_t k) {
  const T kk = static_cast<T>(k);
  for (std::size_t i = 0; i < n; ++i) p[i] /= kk;
}
void divide(DataType dtype, void* p, std::size_t n, std::int64_t k) {
  if (dtype == DataType::kFloat64) {
    div_by(static_cast<double*>(p), n, k);
  } else {
    div_by(static_cast<float*>(p), n, k);
  }
}

std::vector<std::int64_t> rows_of(const std::string& blob) {
  std::vector<std::int64_t> rows(blob.size() / 8);
  if (!rows.empty()) std::memcpy(rows.data(), blob.data(), rows.size() * 8);
  return rows;
}

}  // namespace

struct PsService::Impl {
  struct Core {
    std::string name;
    std::shared_mutex mu;
    std::map<std::pair<std::string, std::int64_t>, std::unique_ptr<Shard>> shards;  // guarded by mu
    std::atomic<bool> shut{false};

    std::string where(const std::string& var, std::int64_t shard) const {
      return "variable '" + var + "' shard " + std::to_string(shard) + " on ps task " + name;
    }
    Status find(const Fields& f, const std::string& prefix, Shard** out);
    Status ahead(const Shard& s, std::int64_t version) const {
      return InvalidArgument("a push for " + where(s.info.variable, s.info.shard) +
                             " says version " + std::to_string(version) +
                             ", ahead of the shard's " + std::to_string(s.version) +
                             " (was the ps task restarted without its checkpoint?)");
    }
    Status check_rows(Shard& s, const std::string& blob, std::vector<std::int64_t>* rows);

    Status create(const Message& req, Message* reply);
    Status pull(const Message& req, Message* reply, Deadline deadline);
    Status push(const Message& req, Message* reply);
    Status set_learning_rate(const Message& req);
    Status read_state(const Message& req, Message* reply);
    Status assign_state(const Message& req);
    void apply_sync(Shard& s);
  };
  std::shared_ptr<Core> core = std::make_shared<Core>();
};

Status PsService::Impl::Core::find(const Fields& f, const std::string& prefix, Shard** out) {
  std::string var;
  std::int64_t shard = 0;
  KOLO_RETURN_IF_ERROR(f.get(prefix + "variable", &var));
  KOLO_RETURN_IF_ERROR(f.get(prefix + "shard", &shard));
  std::shared_lock<std::shared_mutex> lock(mu);
  const auto it = shards.find({var, shard});
  if (it == shards.end()) {
    return InvalidArgument("no " + where(var, shard) + " (" + std::to_string(shards.size()) +
                           " shards there; was it created, or did the ps task restart?)");
  }
  *out = it->second.get();
  return Status::OK();
}

Status PsService::Impl::Core::check_rows(Shard& s, const std::string& blob,
                                         std::vector<std::int64_t>* rows) {
  const std::string at = where(s.info.variable, s.info.shard);
  if (s.info.shape.empty()) return InvalidArgument("row access to the 0-d " + at);
  if (blob.size() % 8 != 0) {
    return InvalidArgument("the rows for " + at + " are " + std::to_string(blob.size()) +
                           " bytes, not a multiple of 8 (int64 indices)");
  }
  *rows = rows_of(blob);
  std::vector<std::int64_t> sorted = *rows;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= s.info.shape[0]) {
      return InvalidArgument("row " + std::to_string(sorted[i]) + " is out of range for " + at +
                             " (rows 0.." + std::to_string(s.info.shape[0] - 1) +
                             ", shard-local indices)");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return InvalidArgument("row " + std::to_string(sorted[i]) +
                             " appears twice in a request for " + at +
                             " (sum duplicate rows' gradients before pushing)");
    }
  }
  return Status::OK();
}

Status PsService::Impl::Core::create(const Message& req, Message* reply) {
  const Fields& f = req.fields;
  ShardInfo info;
  std::int64_t shard = 0, dtype = 0, ndim = 0, row_begin = 0, replicas = 0, kind = 0;
  std::int64_t nesterov = 0, amsgrad = 0, centered = 0;
  KOLO_RETURN_IF_ERROR(f.get("variable", &info.variable));
  KOLO_RETURN_IF_ERROR(f.get("shard", &shard));
  KOLO_RETURN_IF_ERROR(f.get("dtype", &dtype));
  KOLO_RETURN_IF_ERROR(f.get("row_begin", &row_begin));
  KOLO_RETURN_IF_ERROR(f.get("ndim", &ndim));
  KOLO_RETURN_IF_ERROR(f.get("replicas", &replicas));
  const std::string at = where(info.variable, shard);
  if (shard < 0 || shard > (1 << 20)) return InvalidArgument("bad shard index for " + at);
  if (dtype != static_cast<std::int64_t>(DataType::kFloat32) &&
      dtype != static_cast<std::int64_t>(DataType::kFloat64)) {
    return InvalidArgument("dtype " + std::to_string(dtype) + " for " + at +
                           ": ps shards are float32 or float64");
  }
  if (ndim < 0 || ndim > 8) return InvalidArgument(std::to_string(ndim) + " dimensions for " + at);
  if (row_begin < 0)
    return InvalidArgument("row_begin " + std::to_string(row_begin) + " for " + at);
  if (replicas < 0 || replicas > (1 << 20)) {
    return InvalidArgument("replicas_to_aggregate " + std::to_string(replicas) + " for " + at);
  }
  info.shard = static_cast<int>(shard);
  info.dtype = static_cast<DataType>(dtype);
  info.row_begin = row_begin;
  std::size_t elems = 1;
  for (std::int64_t k = 0; k < ndim; ++k) {
    std::int64_t d = 0;
    KOLO_RETURN_IF_ERROR(f.get("dim." + std::to_string(k), &d));
    if (d < 0 || d > (std::int64_t{1} << 40) || (d > 0 && elems > (std::size_t{1} << 40) / d)) {
      return InvalidArgument("shape dimension " + std::to_string(d) + " for " + at);
    }
    elems *= static_cast<std::size_t>(d);
    info.shape.push_back(d);
  }
  UpdateRule rule;
  KOLO_RETURN_IF_ERROR(f.get("rule.kind", &kind));
  rule.kind = static_cast<UpdateRule::Kind>(kind);
  KOLO_RETURN_IF_ERROR(f.get("rule.learning_rate", &rule.learning_rate));
  KOLO_RETURN_IF_ERROR(f.get("rule.momentum", &rule.momentum));
  KOLO_RETURN_IF_ERROR(f.get("rule.nesterov", &nesterov));
  KOLO_RETURN_IF_ERROR(f.get("rule.weight_decay", &rule.weight_decay));
  KOLO_RETURN_IF_ERROR(f.get("rule.beta_1", &rule.beta_1));
  KOLO_RETURN_IF_ERROR(f.get("rule.beta_2", &rule.beta_2));
  KOLO_RETURN_IF_ERROR(f.get("rule.epsilon", &rule.epsilon));
  KOLO_RETURN_IF_ERROR(f.get("rule.amsgrad", &amsgrad));
  KOLO_RETURN_IF_ERROR(f.get("rule.rho", &rule.rho));
  KOLO_RETURN_IF_ERROR(f.get("rule.centered", &centered));
  rule.nesterov = nesterov != 0;
  rule.amsgrad = amsgrad != 0;
  rule.centered = centered != 0;
  if (Status s = check_rule(rule); !s.ok()) return InvalidArgument(s.message() + " for " + at);
  if (req.blobs.size() != 1 || req.blobs[0].size() != info.bytes()) {
    return InvalidArgument("the initial values for " + at + " are " +
                           std::to_string(req.blobs.empty() ? 0 : req.blobs[0].size()) +
                           " bytes; its shape " + shape_string(info.shape) + " of " +
                           dtype_name(info.dtype) + " takes " + std::to_string(info.bytes()));
  }
  std::unique_lock<std::shared_mutex> lock(mu);
  auto& slot = shards[{info.variable, shard}];
  if (slot) {
    const ShardInfo& have = slot->info;
    if (have.shape != info.shape || have.dtype != info.dtype || have.row_begin != info.row_begin) {
      return Mismatch(at + " exists as " + shape_string(have.shape) + " " + dtype_name(have.dtype) +
                      " from row " + std::to_string(have.row_begin) + "; this create asks for " +
                      shape_string(info.shape) + " " + dtype_name(info.dtype) + " from row " +
                      std::to_string(info.row_begin) +
                      " (did the model change? restart the ps tasks for a new model)");
    }
    reply->fields.set("existed", std::int64_t{1});
    return Status::OK();
  }
  auto s = std::make_unique<Shard>();
  s->info = info;
  s->rule = rule;
  s->replicas = static_cast<int>(replicas);
  s->values = req.blobs[0];
  for (std::size_t k = 0; k < slot_names(rule).size(); ++k)
    s->slots.emplace_back(info.bytes(), '\0');
  slot = std::move(s);
  reply->fields.set("existed", std::int64_t{0});
  return Status::OK();
}

Status PsService::Impl::Core::pull(const Message& req, Message* reply, Deadline deadline) {
  std::int64_t n = 0;
  KOLO_RETURN_IF_ERROR(req.fields.get(wire::kItemCount, &n));
  if (n < 0 || n > wire::kMaxBatchItems || static_cast<std::size_t>(n) != req.blobs.size()) {
    return InvalidArgument("a pull of " + std::to_string(n) + " items with " +
                           std::to_string(req.blobs.size()) + " blobs on ps task " + name);
  }
  struct Item {
    Shard* shard;
    bool whole;
    std::int64_t min_version;
    std::vector<std::int64_t> rows;
  };
  std::vector<Item> items(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    KOLO_RETURN_IF_ERROR(find(req.fields, wire::item(i, ""), &it.shard));
    std::int64_t whole = 1;
    KOLO_RETURN_IF_ERROR(req.fields.get(wire::item(i, wire::kWhole), &whole));
    KOLO_RETURN_IF_ERROR(req.fields.get(wire::item(i, "min_version"), &it.min_version));
    it.whole = whole != 0;
    const std::string at = where(it.shard->info.variable, it.shard->info.shard);
    if (it.min_version < 0) {
      return InvalidArgument("min_version " + std::to_string(it.min_version) + " for " + at);
    }
    if (!it.whole) KOLO_RETURN_IF_ERROR(check_rows(*it.shard, req.blobs[i], &it.rows));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    Shard& s = *it.shard;
    std::unique_lock<std::mutex> lock(s.mu);
    const bool reached =
        s.cv.wait_until(lock, deadline, [&] { return s.version >= it.min_version || shut.load(); });
    if (shut.load()) return PeerFailure("ps task " + name + " is shutting down");
    if (!reached) {
      return PeerFailure(where(s.info.variable, s.info.shard) + " is at version " +
                         std::to_string(s.version) + "; the pull waited for version " +
                         std::to_string(it.min_version) +
                         " until its deadline (are enough workers pushing? in synchronous "
                         "mode every version needs replicas_to_aggregate pushes)");
    }
    reply->fields.set(wire::item(i, wire::kVersion), s.version);
    if (it.whole) {
      reply->blobs.push_back(s.values);
    } else {
      const std::size_t rb = s.info.row_bytes();
      std::string out(it.rows.size() * rb, '\0');
      for (std::size_t r = 0; r < it.rows.size(); ++r) {
        std::memcpy(out.data() + r * rb, s.values.data() + it.rows[r] * rb, rb);
      }
      reply->blobs.push_back(std::move(out));
    }
  }
  return Status::OK();
}

void PsService::Impl::Core::apply_sync(Shard& s) {
  const std::size_t e = s.elems();
  divide(s.info.dtype, s.acc.data(), e, s.replicas);
  ++s.step;
  if (s.acc_dense) {
    apply_update(s.rule, s.info.dtype, s.step, s.values.data(), s.acc.data(), s.slot_ptrs(), 0, e);
  } else {
    std::vector<std::int64_t> rows;
    for (std::size_t r = 0; r < s.acc_touched.size(); ++r) {
      if (s.acc_touched[r]) rows.push_back(static_cast<std::int64_t>(r));
    }
    const std::size_t re = s.info.row_bytes() / dtype_size(s.info.dtype);
    const std::size_t rb = s.info.row_bytes();
    std::string g(rows.size() * rb, '\0');
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(g.data() + i * rb, s.acc.data() + rows[i] * rb, rb);
    }
    apply_update_rows(s.rule, s.info.dtype, s.step, s.values.data(), g.data(), s.slot_ptrs(), rows,
                      re);
  }
  ++s.version;
  s.acc.clear();
  s.acc_count = 0;
  s.acc_dense = false;
  s.acc_touched.clear();
  s.cv.notify_all();
}

Status PsService::Impl::Core::push(const Message& req, Message* reply) {
  std::int64_t n = 0;
  KOLO_RETURN_IF_ERROR(req.fields.get(wire::kItemCount, &n));
  if (n < 0 || n > wire::kMaxBatchItems || static_cast<std::size_t>(2 * n) != req.blobs.size()) {
    return InvalidArgument("a push of " + std::to_string(n) + " items with " +
                           std::to_string(req.blobs.size()) + " blobs on ps task " + name);
  }
  struct Item {
    Shard* shard;
    bool whole;
    std::int64_t version;
    std::vector<std::int64_t> rows;
  };
  std::vector<Item> items(static_cast<std::size_t>(n));
  // Check everything before applying anything: a bad item leaves every shard as it was.
  for (std::size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    KOLO_RETURN_IF_ERROR(find(req.fields, wire::item(i, ""), &it.shard));
    std::int64_t whole = 1;
    KOLO_RETURN_IF_ERROR(req.fields.get(wire::item(i, wire::kWhole), &whole));
    KOLO_RETURN_IF_ERROR(req.fields.get(wire::item(i, wire::kVersion), &it.version));
    it.whole = whole != 0;
    const Shard& s = *it.shard;
    const std::string at = where(s.info.variable, s.info.shard);
    if (it.version < 0)
      return InvalidArgument("version " + std::to_string(it.version) + " for " + at);
    {
      std::lock_guard<std::mutex> lock(it.shard->mu);
      if (it.version > it.shard->version) return ahead(*it.shard, it.version);
    }
    if (!it.whole) KOLO_RETURN_IF_ERROR(check_rows(*it.shard, req.blobs[2 * i], &it.rows));
    const std::size_t want = it.whole ? s.info.bytes() : it.rows.size() * s.info.row_bytes();
    if (req.blobs[2 * i + 1].size() != want) {
      return InvalidArgument("the gradient for " + at + " is " +
                             std::to_string(req.blobs[2 * i + 1].size()) + " bytes; " +
                             (it.whole ? "its shape " + shape_string(s.info.shape)
                                       : std::to_string(it.rows.size()) + " rows") +
                             " of " + dtype_name(s.info.dtype) + " take " + std::to_string(want));
    }
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    Shard& s = *it.shard;
    const std::string& grad = req.blobs[2 * i + 1];
    std::lock_guard<std::mutex> lock(s.mu);
    if (it.version > s.version) return ahead(s, it.version);
    const std::size_t e = s.elems();
    const std::size_t re = s.info.row_bytes() / dtype_size(s.info.dtype);
    bool accepted = true;
    if (s.replicas == 0) {
      ++s.step;
      if (it.whole) {
        apply_update(s.rule, s.info.dtype, s.step, s.values.data(), grad.data(), s.slot_ptrs(), 0,
                     e);
      } else {
        apply_update_rows(s.rule, s.info.dtype, s.step, s.values.data(), grad.data(), s.slot_ptrs(),
                          it.rows, re);
      }
      ++s.version;
      s.cv.notify_all();
    } else if (it.version < s.version) {
      accepted = false;  // stale: pulled before the last update
    } else {
      if (s.acc.empty()) s.acc.assign(s.info.bytes(), '\0');
      if (it.whole) {
        add_into(s.info.dtype, s.acc.data(), grad.data(), e);
        s.acc_dense = true;
      } else {
        if (s.acc_touched.empty()) s.acc_touched.assign(s.rows(), 0);
        const std::size_t rb = s.info.row_bytes();
        for (std::size_t r = 0; r < it.rows.size(); ++r) {
          add_into(s.info.dtype, s.acc.data() + it.rows[r] * rb, grad.data() + r * rb, re);
          s.acc_touched[static_cast<std::size_t>(it.rows[r])] = 1;
        }
      }
      if (++s.acc_count == s.replicas) apply_sync(s);
    }
    reply->fields.set(wire::item(i, "accepted"), std::int64_t{accepted ? 1 : 0});
  }
  return Status::OK();
}

Status PsService::Impl::Core::set_learning_rate(const Message& req) {
  double lr = 0;
  KOLO_RETURN_IF_ERROR(req.fields.get("learning_rate", &lr));
  if (!(lr >= 0)) {
    return InvalidArgument("learning rate " + number_string(lr) + " for ps task " + name +
                           " (it must be >= 0)");
  }
  std::shared_lock<std::shared_mutex> lock(mu);
  for (auto& [key, s] : shards) {
    std::lock_guard<std::mutex> sl(s->mu);
    s->rule.learning_rate = lr;
  }
  return Status::OK();
}

Status PsService::Impl::Core::read_state(const Message& req, Message* reply) {
  Shard* s = nullptr;
  KOLO_RETURN_IF_ERROR(find(req.fields, "", &s));
  const auto names = slot_names(s->rule);
  std::lock_guard<std::mutex> lock(s->mu);
  reply->fields.set("step", s->step).set(wire::kVersion, s->version);
  reply->fields.set("slots", static_cast<std::int64_t>(names.size()));
  reply->blobs.push_back(s->values);
  for (std::size_t k = 0; k < names.size(); ++k) {
    reply->fields.set("slot." + std::to_string(k), names[k]);
    reply->blobs.push_back(s->slots[k]);
  }
  return Status::OK();
}

Status PsService::Impl::Core::assign_state(const Message& req) {
  Shard* s = nullptr;
  KOLO_RETURN_IF_ERROR(find(req.fields, "", &s));
  const std::string at = where(s->info.variable, s->info.shard);
  std::int64_t step = 0, version = 0, nslots = 0;
  KOLO_RETURN_IF_ERROR(req.fields.get("step", &step));
  KOLO_RETURN_IF_ERROR(req.fields.get(wire::kVersion, &version));
  KOLO_RETURN_IF_ERROR(req.fields.get("slots", &nslots));
  if (step < 0 || version < 0) {
    return InvalidArgument("step " + std::to_string(step) + ", version " + std::to_string(version) +
                           " for " + at);
  }
  const auto names = slot_names(s->rule);
  if (nslots < 0 || static_cast<std::size_t>(nslots) + 1 != req.blobs.size()) {
    return InvalidArgument("a state of " + std::to_string(nslots) + " slots with " +
                           std::to_string(req.blobs.size()) + " blobs for " + at);
  }
  std::vector<std::string> slots(names.size(), std::string(s->info.bytes(), '\0'));
  for (std::int64_t k = 0; k < nslots; ++k) {
    std::string slot_name;
    KOLO_RETURN_IF_ERROR(req.fields.get("slot." + std::to_string(k), &slot_name));
    const auto pos = std::find(names.begin(), names.end(), slot_name);
    if (pos == names.end()) {
      return InvalidArgument("the state for " + at + " has a slot '" + slot_name +
                             "' its update rule does not keep (was the optimizer changed?)");
    }
    const std::string& blob = req.blobs[static_cast<std::size_t>(k) + 1];
    if (blob.size() != s->info.bytes()) {
      return InvalidArgument("the slot '" + slot_name + "' for " + at + " is " +
                             std::to_string(blob.size()) + " bytes, not " +
                             std::to_string(s->info.bytes()));
    }
    slots[static_cast<std::size_t>(pos - names.begin())] = blob;
  }
  if (req.blobs[0].size() != s->info.bytes()) {
    return InvalidArgument("the values for " + at + " are " + std::to_string(req.blobs[0].size()) +
                           " bytes, not " + std::to_string(s->info.bytes()));
  }
  std::lock_guard<std::mutex> lock(s->mu);
  s->values = req.blobs[0];
  s->slots = std::move(slots);
  s->step = step;
  s->version = version;
  s->acc.clear();
  s->acc_count = 0;
  s->acc_dense = false;
  s->acc_touched.clear();
  s->cv.notify_all();
  return Status::OK();
}

PsService::PsService(RpcServer& server) : impl_(std::make_unique<Impl>()) {
  auto core = impl_->core;
  core->name = server.name();
  server.handle(wire::kCreate,
                [core](const Message& q, Message* r, Deadline) { return core->create(q, r); });
  server.handle(wire::kPull,
                [core](const Message& q, Message* r, Deadline d) { return core->pull(q, r, d); });
  server.handle(wire::kPush,
                [core](const Message& q, Message* r, Deadline) { return core->push(q, r); });
  server.handle(wire::kSetLearningRate, [core](const Message& q, Message*, Deadline) {
    return core->set_learning_rate(q);
  });
  server.handle(wire::kReadState,
                [core](const Message& q, Message* r, Deadline) { return core->read_state(q, r); });
  server.handle(wire::kAssignState,
                [core](const Message& q, Message*, Deadline) { return core->assign_state(q); });
  server.handle(wire::kPing, [](const Message&, Message*, Deadline) { return Status::OK(); });
}

PsService::~PsService() { shutdown(); }

void PsService::shutdown() {
  auto& core = *impl_->core;
  core.shut.store(true);
  std::shared_lock<std::shared_mutex> lock(core.mu);
  for (auto& [key, s] : core.shards) {
    // Taking the shard's mutex orders this wake after a waiter's predicate check.
    std::lock_guard<std::mutex> sl(s->mu);
    s->cv.notify_all();
  }
}

}  // namespace kolo::ps
