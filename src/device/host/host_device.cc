// The host stand-in's device (host_device.h) and its streams and events (host_stream.h).
#include "device/host/host_device.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "common/convert.h"
#include "common/reduce.h"
#include "device/arg_checks.h"
#include "device/host/host_stream.h"

namespace kolo::device::host {

// --- Marker, HostStream, HostEvent --------------------------------------------------------

void Marker::complete(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    status_ = status;
  }
  cv_.notify_all();
}

bool Marker::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status Marker::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

Status Marker::wait_until(Deadline deadline, const std::string& what) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return done_; })) {
    return PeerFailure(what +
                       " did not finish in time: the device work before it is still "
                       "running or waits for a peer that does not take part");
  }
  return status_;
}

HostStream::HostStream(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostStream::enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void HostStream::enqueue_work(std::function<Status()> work) {
  enqueue([work = std::move(work)](Status& sticky) {
    if (sticky.ok()) sticky = work();
  });
}

void HostStream::run() {
  Status sticky;  // this thread only
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(sticky);
  }
}

std::shared_ptr<Marker> HostEvent::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

void HostEvent::set_latest(std::shared_ptr<Marker> marker) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(marker);
}

// --- the device ---------------------------------------------------------------------------

Status make_host_collectives(const std::string& device,
                             std::unique_ptr<transport::Communicator> comm, double timeout_seconds,
                             std::unique_ptr<Collectives>* out);

namespace {

class HostDevice : public Device {
 public:
  explicit HostDevice(HostDeviceOptions o) : o_(std::move(o)) {}

  std::string name() const override { return "host stand-in " + std::to_string(o_.index); }

  Status allocate(std::size_t bytes, void** out) override {
    // 256-byte aligned, as cudaMalloc's; at least one byte so that the pointer is unique.
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
    *out = std::aligned_alloc(256, rounded);
    if (*out == nullptr) {
      return Status(ErrorCode::kInternal,
                    name() + ": cannot allocate " + std::to_string(bytes) + " bytes");
    }
    return Status::OK();
  }
  void release(void* ptr) override { std::free(ptr); }

  Status create_stream(std::unique_ptr<Stream>* out) override {
    *out = std::make_unique<HostStream>(name() + " stream " + std::to_string(streams_++));
    return Status::OK();
  }
  Status create_event(std::unique_ptr<Event>* out) override {
    *out = std::make_unique<HostEvent>();
    return Status::OK();
  }

  Status record(Event& event, Stream& stream) override {
    auto marker = std::make_shared<Marker>();
    as_event(event).set_latest(marker);
    as_stream(stream).enqueue([marker](Status& sticky) { marker->complete(sticky); });
    return Status::OK();
  }

  Status wait_event(Stream& stream, Event& event) override {
    std::shared_ptr<Marker> marker = as_event(event).latest();
    if (!marker) return Status::OK();  // never recorded: nothing to wait for
    HostStream& s = as_stream(stream);
    const double timeout = o_.timeout_seconds;
    s.enqueue([marker, timeout, what = s.name() + "'s wait for an event"](Status& sticky) {
      if (!sticky.ok()) return;
      // The wait's own bound starts when the stream reaches it, as a GPU's would.
      sticky = marker->wait_until(deadline_after(timeout), what);
    });
    return Status::OK();
  }

  void* native_event(Event& event) override { return &as_event(event); }
  Status wait_native_event(Stream& stream, void* native) override {
    if (native == nullptr) return InvalidArgument(name() + ": a null event to wait for");
    return wait_event(stream, *static_cast<HostEvent*>(native));
  }

  Status query(Event& event, bool* done) override {
    std::shared_ptr<Marker> marker = as_event(event).latest();
    *done = !marker || marker->done();
    return *done && marker ? marker->status() : Status::OK();
  }

  Status synchronize(Event& event, Deadline deadline) override {
    std::shared_ptr<Marker> marker = as_event(event).latest();
    if (!marker) return Status::OK();
    return marker->wait_until(deadline, name() + ": an event");
  }

  Status copy(void* dst, const void* src, std::size_t bytes, Stream& stream) override {
    as_stream(stream).enqueue_work([dst, src, bytes] {
      if (bytes > 0) std::memmove(dst, src, bytes);
      return Status::OK();
    });
    return Status::OK();
  }

  Status convert(void* dst, DataType to, const void* src, DataType from, std::size_t count,
                 double factor, double divisor, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_convert(name(), from, to));
    as_stream(stream).enqueue_work([=] {
      convert_scaled(src, from, dst, to, count, factor, divisor);
      return Status::OK();
    });
    return Status::OK();
  }

  Status reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op,
                Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_reduce_op(name(), op));
    as_stream(stream).enqueue_work([=] {
      reduce_into(dst, src, count, dtype, op);
      return Status::OK();
    });
    return Status::OK();
  }

  Status host_function(Stream& stream, std::function<void()> fn) override {
    as_stream(stream).enqueue_work([fn = std::move(fn)] {
      fn();
      return Status::OK();
    });
    return Status::OK();
  }

  Status create_unique_id(UniqueId* out) override {
    std::random_device rd;
    for (auto& b : out->bytes) b = static_cast<unsigned char>(rd());
    return Status::OK();
  }

  Status create_collectives(const UniqueId& id, int rank, int size, Deadline deadline,
                            std::unique_ptr<Collectives>* out) override {
    if (size < 1 || rank < 0 || rank >= size) {
      return InvalidArgument(name() + ": rank " + std::to_string(rank) + " of " +
                             std::to_string(size) + " ranks");
    }
    if (!o_.connect) {
      return Status(ErrorCode::kUnsupported,
                    name() + " has no network for collectives (HostDeviceOptions::connect)");
    }
    std::unique_ptr<transport::Communicator> comm;
    KOLO_RETURN_IF_ERROR(o_.connect(id, rank, size, deadline, &comm));
    return make_host_collectives(name(), std::move(comm), o_.timeout_seconds, out);
  }

 private:
  static HostStream& as_stream(Stream& s) { return static_cast<HostStream&>(s); }
  static HostEvent& as_event(Event& e) { return static_cast<HostEvent&>(e); }

  const HostDeviceOptions o_;
  int streams_ = 0;  // names the streams
};

}  // namespace

std::unique_ptr<Device> make_host_device(HostDeviceOptions options) {
  return std::make_unique<HostDevice>(std::move(options));
}

// --- InprocFabric -------------------------------------------------------------------------

Connect InprocFabric::connector() {
  return [this](const UniqueId& id, int rank, int size, Deadline,
                std::unique_ptr<transport::Communicator>* out) -> Status {
    std::shared_ptr<transport::InprocWorld> world;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& w = worlds_[id.bytes];
      if (!w) w = std::make_shared<transport::InprocWorld>(size);
      world = w;
    }
    if (world->size() != size) {
      return Mismatch("rank " + std::to_string(rank) + " connects to " + std::to_string(size) +
                      " ranks, where the id's communicator has " + std::to_string(world->size()));
    }
    *out = world->communicator(rank);
    return Status::OK();
  };
}

std::vector<transport::InprocWorld*> InprocFabric::worlds() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<transport::InprocWorld*> out;
  for (auto& [id, w] : worlds_) out.push_back(w.get());
  return out;
}

transport::InprocWorld* InprocFabric::world(const UniqueId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = worlds_.find(id.bytes);
  return it == worlds_.end() ? nullptr : it->second.get();
}

}  // namespace kolo::device::host
