// The CUDA device (cuda_device.h).
#include "device/cuda/cuda_device.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "device/arg_checks.h"
#include "device/cuda/kernels.h"
#include "device/host_id.h"
#include "device/poll.h"

namespace kolo::device::cuda {

namespace {

Status cuda_error(const std::string& what, cudaError_t e) {
  return Status(ErrorCode::kInternal,
                what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

class CudaStream : public Stream {
 public:
  CudaStream(cudaStream_t s, bool owned) : stream(s), owned_(owned) {}
  ~CudaStream() override {
    if (owned_) cudaStreamDestroy(stream);
  }
  const cudaStream_t stream;

 private:
  const bool owned_;
};

class CudaEvent : public Event {
 public:
  // `opened`: from another process's handle, recorded there (its records are not seen).
  explicit CudaEvent(cudaEvent_t e, bool opened = false) : event(e), recorded(opened) {}
  ~CudaEvent() override { cudaEventDestroy(event); }
  const cudaEvent_t event;
  bool recorded = false;  // an event never recorded counts as complete
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(const CudaDeviceOptions& o) : o_(o) {}

  std::string name() const override { return "cuda:" + std::to_string(o_.index); }

  std::string physical_id() const override {
    cudaDeviceProp prop{};
    std::string uuid;
    if (cudaGetDeviceProperties(&prop, o_.index) == cudaSuccess) {
      static const char* hex = "0123456789abcdef";
      for (char c : prop.uuid.bytes) {
        uuid += hex[(static_cast<unsigned char>(c) >> 4) & 15];
        uuid += hex[static_cast<unsigned char>(c) & 15];
      }
    } else {
      uuid = "ordinal " + std::to_string(o_.index);
    }
    return "host " + host_id() + " gpu " + uuid;
  }

  std::string host() const override { return host_id(); }

  Status allocate_shared(std::size_t bytes, void** out, IpcHandle* handle) override {
    static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(handle->bytes));
    KOLO_RETURN_IF_ERROR(allocate(bytes, out));
    cudaIpcMemHandle_t h;
    const cudaError_t e = cudaIpcGetMemHandle(&h, *out);
    if (e != cudaSuccess) {
      release(*out);
      return cuda_error(name() + ": cudaIpcGetMemHandle", e);
    }
    std::memcpy(handle->bytes.data(), &h, sizeof h);
    return Status::OK();
  }
  Status open_shared(const IpcHandle& handle, void** out) override {
    KOLO_RETURN_IF_ERROR(use());
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.bytes.data(), sizeof h);
    const cudaError_t e = cudaIpcOpenMemHandle(out, h, cudaIpcMemLazyEnablePeerAccess);
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": cudaIpcOpenMemHandle", e);
  }
  void close_shared(void* ptr) override {
    if (use().ok()) cudaIpcCloseMemHandle(ptr);
  }
  Status create_shared_event(std::unique_ptr<Event>* out, IpcHandle* handle) override {
    static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(handle->bytes));
    KOLO_RETURN_IF_ERROR(use());
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess);
    if (e != cudaSuccess)
      return cuda_error(name() + ": cudaEventCreateWithFlags (interprocess)", e);
    auto event = std::make_unique<CudaEvent>(ev);
    cudaIpcEventHandle_t h;
    e = cudaIpcGetEventHandle(&h, ev);
    if (e != cudaSuccess) return cuda_error(name() + ": cudaIpcGetEventHandle", e);
    std::memcpy(handle->bytes.data(), &h, sizeof h);
    *out = std::move(event);
    return Status::OK();
  }
  Status open_shared_event(const IpcHandle& handle, std::unique_ptr<Event>* out) override {
    KOLO_RETURN_IF_ERROR(use());
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.bytes.data(), sizeof h);
    cudaEvent_t ev;
    const cudaError_t e = cudaIpcOpenEventHandle(&ev, h);
    if (e != cudaSuccess) return cuda_error(name() + ": cudaIpcOpenEventHandle", e);
    *out = std::make_unique<CudaEvent>(ev, true);
    return Status::OK();
  }

  Status allocate(std::size_t bytes, void** out) override {
    KOLO_RETURN_IF_ERROR(use());
    const cudaError_t e = cudaMalloc(out, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess)
      return cuda_error(name() + ": cudaMalloc of " + std::to_string(bytes) + " bytes", e);
    return Status::OK();
  }
  void release(void* ptr) override {
    if (use().ok()) cudaFree(ptr);
  }

  Status create_stream(std::unique_ptr<Stream>* out) override {
    KOLO_RETURN_IF_ERROR(use());
    cudaStream_t s;
    const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_error(name() + ": cudaStreamCreateWithFlags", e);
    *out = std::make_unique<CudaStream>(s, true);
    return Status::OK();
  }
  Status create_event(std::unique_ptr<Event>* out) override {
    KOLO_RETURN_IF_ERROR(use());
    cudaEvent_t ev;
    const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_error(name() + ": cudaEventCreateWithFlags", e);
    *out = std::make_unique<CudaEvent>(ev);
    return Status::OK();
  }

  Status record(Event& event, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(use());
    CudaEvent& ev = as_event(event);
    const cudaError_t e = cudaEventRecord(ev.event, native_stream(stream));
    if (e != cudaSuccess) return cuda_error(name() + ": cudaEventRecord", e);
    ev.recorded = true;
    return Status::OK();
  }
  Status wait_event(Stream& stream, Event& event) override {
    KOLO_RETURN_IF_ERROR(use());
    const cudaError_t e = cudaStreamWaitEvent(native_stream(stream), as_event(event).event, 0);
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": cudaStreamWaitEvent", e);
  }
  void* native_event(Event& event) override { return as_event(event).event; }
  Status wait_native_event(Stream& stream, void* native) override {
    if (native == nullptr) return InvalidArgument(name() + ": a null event to wait for");
    KOLO_RETURN_IF_ERROR(use());
    const cudaError_t e =
        cudaStreamWaitEvent(native_stream(stream), static_cast<cudaEvent_t>(native), 0);
    return e == cudaSuccess ? Status::OK()
                            : cuda_error(name() + ": cudaStreamWaitEvent (a caller's event)", e);
  }
  Status query(Event& event, bool* done) override {
    KOLO_RETURN_IF_ERROR(use());
    CudaEvent& ev = as_event(event);
    *done = true;
    if (!ev.recorded) return Status::OK();
    const cudaError_t e = cudaEventQuery(ev.event);
    if (e == cudaErrorNotReady) {
      *done = false;
      return Status::OK();
    }
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": the work before an event", e);
  }
  Status synchronize(Event& event, Deadline deadline) override {
    return poll_until(
        deadline, std::chrono::microseconds(10), [&](bool* done) { return query(event, done); },
        [&] {
          return PeerFailure(name() +
                             ": an event did not complete in time: the GPU work before it "
                             "is still running or waits for a peer that does not take part");
        });
  }

  Status copy(void* dst, const void* src, std::size_t bytes, Stream& stream) override {
    if (bytes == 0) return Status::OK();
    KOLO_RETURN_IF_ERROR(use());
    const cudaError_t e =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native_stream(stream));
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": cudaMemcpyAsync", e);
  }
  Status convert(void* dst, DataType to, const void* src, DataType from, std::size_t count,
                 double factor, double divisor, Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_convert(name(), from, to));
    KOLO_RETURN_IF_ERROR(use());
    const cudaError_t e =
        launch_convert(dst, to, src, from, count, factor, divisor, native_stream(stream));
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": the convert kernel", e);
  }
  Status reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op,
                Stream& stream) override {
    KOLO_RETURN_IF_ERROR(check_reduce_op(name(), op));
    KOLO_RETURN_IF_ERROR(use());
    const cudaError_t e = launch_reduce(dst, src, count, dtype, op, native_stream(stream));
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": the reduce kernel", e);
  }
  Status host_function(Stream& stream, std::function<void()> fn) override {
    KOLO_RETURN_IF_ERROR(use());
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t e = cudaLaunchHostFunc(
        native_stream(stream),
        [](void* p) {
          auto* f = static_cast<std::function<void()>*>(p);
          (*f)();
          delete f;
        },
        heap);
    if (e != cudaSuccess) {
      delete heap;
      return cuda_error(name() + ": cudaLaunchHostFunc", e);
    }
    return Status::OK();
  }

  Status create_unique_id(UniqueId* out) override { return nccl_unique_id(out); }
  Status create_collectives(const UniqueId& id, int rank, int size, Deadline deadline,
                            std::unique_ptr<Collectives>* out) override {
    KOLO_RETURN_IF_ERROR(use());
    return make_nccl_collectives(o_.index, id, rank, size, o_.timeout_seconds, deadline, out);
  }

 private:
  Status use() const {
    const cudaError_t e = cudaSetDevice(o_.index);
    return e == cudaSuccess ? Status::OK() : cuda_error(name() + ": cudaSetDevice", e);
  }
  static CudaEvent& as_event(Event& e) { return static_cast<CudaEvent&>(e); }

  const CudaDeviceOptions o_;
};

}  // namespace

Status make_cuda_device(const CudaDeviceOptions& options, std::unique_ptr<Device>* out) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return Status(ErrorCode::kUnsupported, std::string("no CUDA device: ") + cudaGetErrorName(e) +
                                               " (" + cudaGetErrorString(e) + ")");
  }
  if (options.index < 0 || options.index >= count) {
    return Status(ErrorCode::kUnsupported, "no CUDA device " + std::to_string(options.index) +
                                               ": this process sees " + std::to_string(count));
  }
  *out = std::make_unique<CudaDevice>(options);
  return Status::OK();
}

std::unique_ptr<Stream> stream_view(cudaStream_t stream) {
  return std::make_unique<CudaStream>(stream, false);
}

cudaStream_t native_stream(Stream& stream) { return static_cast<CudaStream&>(stream).stream; }

}  // namespace kolo::device::cuda
