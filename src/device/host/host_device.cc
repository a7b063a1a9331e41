// The host stand-in's device (host_device.h) and its streams and events (host_stream.h).
#include "device/host/host_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "common/convert.h"
#include "common/reduce.h"
#include "device/arg_checks.h"
#include "device/host/host_stream.h"
#include "device/host_id.h"
#include "device/poll.h"

namespace kolo::device::host {

// --- SharedMapping ------------------------------------------------------------------------

namespace {

// A handle: the segment's name (NUL-terminated) in the first 56 bytes, its size in the
// last 8.
constexpr std::size_t kNameBytes = 56;

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::string random_shared_name() {
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char text[kNameBytes];
  std::snprintf(text, sizeof text, "/kolo-dev-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(r));
  return text;
}

template <typename T>
std::atomic_ref<T> at(T& field) {
  return std::atomic_ref<T>(field);
}

}  // namespace

std::string SharedMapping::name_of(const IpcHandle& handle) {
  const char* p = reinterpret_cast<const char*>(handle.bytes.data());
  return std::string(p, strnlen(p, kNameBytes));
}

Status SharedMapping::create(std::size_t bytes, std::unique_ptr<SharedMapping>* out,
                             IpcHandle* handle) {
  auto m = std::make_unique<SharedMapping>();
  m->name_ = random_shared_name();
  m->bytes_ = std::max<std::size_t>(bytes, 1);
  const int fd = shm_open(m->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return Status(ErrorCode::kInternal,
                  "host stand-in: shm_open(" + m->name_ + ") failed: " + errno_text(errno));
  }
  m->owner_ = true;
  m->linked_ = true;
  const int err = posix_fallocate(fd, 0, static_cast<off_t>(m->bytes_));
  if (err != 0) {
    ::close(fd);
    return Status(ErrorCode::kInternal, "host stand-in: cannot reserve " +
                                            std::to_string(m->bytes_) + " bytes of /dev/shm for " +
                                            m->name_ + ": " + errno_text(err));
  }
  m->data_ = mmap(nullptr, m->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m->data_ == MAP_FAILED) {
    m->data_ = nullptr;
    return Status(ErrorCode::kInternal, "host stand-in: mmap of " + m->name_ + " failed");
  }
  handle->bytes.fill(0);
  std::memcpy(handle->bytes.data(), m->name_.data(), m->name_.size());
  const std::uint64_t size = m->bytes_;
  std::memcpy(handle->bytes.data() + kNameBytes, &size, sizeof size);
  *out = std::move(m);
  return Status::OK();
}

Status SharedMapping::open(const IpcHandle& handle, std::unique_ptr<SharedMapping>* out) {
  auto m = std::make_unique<SharedMapping>();
  m->name_ = name_of(handle);
  std::uint64_t size = 0;
  std::memcpy(&size, handle.bytes.data() + kNameBytes, sizeof size);
  if (m->name_.rfind("/kolo-dev-", 0) != 0 || size == 0) {
    return InvalidArgument("host stand-in: not a shared-memory handle of a host stand-in");
  }
  const int fd = shm_open(m->name_.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return Status(ErrorCode::kPeerFailure,
                  "host stand-in: cannot open " + m->name_ +
                      " (its owner removed it or exited): " + errno_text(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != size) {
    ::close(fd);
    return Internal("host stand-in: " + m->name_ + " is not of the handle's " +
                    std::to_string(size) + " bytes");
  }
  m->bytes_ = size;
  m->data_ = mmap(nullptr, m->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m->data_ == MAP_FAILED) {
    m->data_ = nullptr;
    return Status(ErrorCode::kInternal, "host stand-in: mmap of " + m->name_ + " failed");
  }
  *out = std::move(m);
  return Status::OK();
}

void SharedMapping::unlink() {
  if (owner_ && linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

SharedMapping::~SharedMapping() {
  unlink();
  if (data_ != nullptr) munmap(data_, bytes_);
}

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
  explicit HostDevice(HostDeviceOptions o) : o_(std::move(o)), own_id_(make_physical_id(o_)) {}

  std::string name() const override { return "host stand-in " + std::to_string(o_.index); }

  std::string physical_id() const override { return own_id_; }
  std::string host() const override { return o_.host.empty() ? host_id() : o_.host; }

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
  void release(void* ptr) override {
    {
      std::lock_guard<std::mutex> lock(shared_mu_);
      if (shared_.erase(ptr) > 0) return;  // the mapping's destructor unmaps and unlinks
    }
    std::free(ptr);
  }

  Status allocate_shared(std::size_t bytes, void** out, IpcHandle* handle) override {
    std::unique_ptr<SharedMapping> m;
    KOLO_RETURN_IF_ERROR(SharedMapping::create(bytes, &m, handle));
    *out = m->data();
    std::lock_guard<std::mutex> lock(shared_mu_);
    shared_[*out] = std::move(m);
    return Status::OK();
  }
  Status open_shared(const IpcHandle& handle, void** out) override {
    std::lock_guard<std::mutex> lock(shared_mu_);
    for (const auto& [ptr, m] : shared_) {
      if (m->name() == SharedMapping::name_of(handle)) {
        return InvalidArgument(name() + ": open_shared() of this device's own memory (use its " +
                               "pointer, as CUDA requires)");
      }
    }
    std::unique_ptr<SharedMapping> m;
    KOLO_RETURN_IF_ERROR(SharedMapping::open(handle, &m));
    *out = m->data();
    opened_[*out] = std::move(m);
    return Status::OK();
  }
  void close_shared(void* ptr) override {
    std::lock_guard<std::mutex> lock(shared_mu_);
    opened_.erase(ptr);
  }
  Status create_shared_event(std::unique_ptr<Event>* out, IpcHandle* handle) override {
    std::unique_ptr<SharedMapping> m;
    KOLO_RETURN_IF_ERROR(SharedMapping::create(sizeof(SharedEventState), &m, handle));
    std::memset(m->data(), 0, m->bytes());
    std::shared_ptr<SharedMapping> mapping(std::move(m));
    {
      std::lock_guard<std::mutex> lock(shared_mu_);
      std::erase_if(events_, [](const auto& e) { return e.second.expired(); });
      events_[mapping->name()] = mapping;
    }
    *out = std::make_unique<HostEvent>(std::move(mapping), true);
    return Status::OK();
  }
  Status open_shared_event(const IpcHandle& handle, std::unique_ptr<Event>* out) override {
    std::unique_ptr<SharedMapping> m;
    KOLO_RETURN_IF_ERROR(SharedMapping::open(handle, &m));
    if (m->bytes() != sizeof(SharedEventState)) {
      return InvalidArgument(name() + ": " + m->name() + " is not a shared event");
    }
    *out = std::make_unique<HostEvent>(std::shared_ptr<SharedMapping>(std::move(m)), false);
    return Status::OK();
  }
  void unpublish(const IpcHandle& handle) override {
    const std::string n = SharedMapping::name_of(handle);
    std::lock_guard<std::mutex> lock(shared_mu_);
    for (auto& [ptr, m] : shared_) {
      if (m->name() == n) m->unlink();
    }
    auto it = events_.find(n);
    if (it != events_.end()) {
      if (auto event = it->second.lock()) event->unlink();
      events_.erase(it);
    }
  }

  Status create_stream(std::unique_ptr<Stream>* out) override {
    *out = std::make_unique<HostStream>(name() + " stream " + std::to_string(streams_++));
    return Status::OK();
  }
  Status create_event(std::unique_ptr<Event>* out) override {
    *out = std::make_unique<HostEvent>();
    return Status::OK();
  }

  Status record(Event& event, Stream& stream) override {
    HostEvent& ev = as_event(event);
    auto marker = std::make_shared<Marker>();
    if (ev.shared() == nullptr) {
      ev.set_latest(marker);
      as_stream(stream).enqueue([marker](Status& sticky) { marker->complete(sticky); });
      return Status::OK();
    }
    if (!ev.owner()) {
      return InvalidArgument(name() + ": record() of an event opened from another process");
    }
    const std::uint64_t number = at(ev.shared()->recorded).fetch_add(1) + 1;
    ev.set_latest(marker);
    as_stream(stream).enqueue([marker, m = ev.mapping(), number](Status& sticky) {
      auto* st = static_cast<SharedEventState*>(m->data());
      if (!sticky.ok() && at(st->failed).load() == 0) {
        const std::string text = sticky.message().substr(0, sizeof(st->error) - 1);
        std::memcpy(st->error, text.c_str(), text.size() + 1);
        at(st->failed).store(1);
      }
      at(st->completed).store(number);
      marker->complete(sticky);
    });
    return Status::OK();
  }

  Status wait_event(Stream& stream, Event& event) override {
    HostEvent& ev = as_event(event);
    std::shared_ptr<Marker> marker = ev.latest();
    if (!marker && ev.shared() != nullptr) return wait_shared(stream, ev);
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
    if (opened_elsewhere(event)) {
      *done = true;
      return shared_state(*as_event(event).shared(), at(as_event(event).shared()->recorded).load(),
                          done);
    }
    std::shared_ptr<Marker> marker = as_event(event).latest();
    *done = !marker || marker->done();
    return *done && marker ? marker->status() : Status::OK();
  }

  Status synchronize(Event& event, Deadline deadline) override {
    if (opened_elsewhere(event)) {
      SharedEventState& st = *as_event(event).shared();
      return wait_for_record(st, at(st.recorded).load(), deadline,
                             name() + ": a shared event of another process");
    }
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
  static std::string make_physical_id(const HostDeviceOptions& o) {
    static std::atomic<int> devices{0};
    return "host " + (o.host.empty() ? host_id() : o.host) + " stand-in " +
           (o.shared_id.empty()
                ? "own " + std::to_string(getpid()) + "." + std::to_string(devices++)
                : "shared " + o.shared_id);
  }
  static HostStream& as_stream(Stream& s) { return static_cast<HostStream&>(s); }
  static HostEvent& as_event(Event& e) { return static_cast<HostEvent&>(e); }
  static bool opened_elsewhere(Event& e) {
    return as_event(e).shared() != nullptr && !as_event(e).owner();
  }

  // Whether record `number` of a shared event completed (*done), and its error.
  static Status shared_state(const SharedEventState& st, std::uint64_t number, bool* done) {
    auto& s = const_cast<SharedEventState&>(st);
    if (at(s.failed).load() != 0) {
      *done = true;
      return PeerFailure(std::string("the work before a shared event failed: ") + s.error);
    }
    *done = at(s.completed).load() >= number;
    return Status::OK();
  }

  // Polls (device/poll.h) until record `number` completed.
  static Status wait_for_record(const SharedEventState& st, std::uint64_t number, Deadline deadline,
                                const std::string& what) {
    return poll_until(
        deadline, std::chrono::microseconds(5),
        [&](bool* done) { return shared_state(st, number, done); },
        [&] {
          return PeerFailure(what +
                             " did not complete in time: its process's device work is still "
                             "running, waits for a peer, or the process died");
        });
  }

  // A stream waits for the last record of an event another process owns (made before
  // this call), bounded by the stand-in's timeout once the stream reaches the wait.
  Status wait_shared(Stream& stream, HostEvent& ev) {
    const std::uint64_t number = at(ev.shared()->recorded).load();
    if (number == 0) return Status::OK();
    HostStream& s = as_stream(stream);
    s.enqueue([m = ev.mapping(), number, timeout = o_.timeout_seconds,
               what = s.name() + "'s wait for a shared event"](Status& sticky) {
      if (!sticky.ok()) return;
      sticky = wait_for_record(*static_cast<SharedEventState*>(m->data()), number,
                               deadline_after(timeout), what);
    });
    return Status::OK();
  }

  const HostDeviceOptions o_;
  int streams_ = 0;           // names the streams
  const std::string own_id_;  // physical_id()
  std::mutex shared_mu_;
  std::map<void*, std::unique_ptr<SharedMapping>> shared_;  // allocate_shared's
  std::map<void*, std::unique_ptr<SharedMapping>> opened_;  // open_shared's
  // The shared events made here and not yet unpublished (the events own their mappings).
  std::map<std::string, std::weak_ptr<SharedMapping>> events_;
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
