// The device layer: one accelerator's memory, streams, events, kernels and collectives,
// behind an interface with two implementations, as leveldb's Env makes the outside world
// swappable in tests:
//   - the real one (cuda/, built with KOLO_CUDA): the CUDA runtime, kolo's CUDA kernels
//     and NCCL;
//   - a host stand-in (host/): host memory, one thread per stream, events as completion
//     markers, kolo's CPU kernels, and "NCCL" calls done over a CPU transport.
// The data path for device tensors (the NCCL backend, stream ordering, device fusion) is
// written once against this interface, so every line of its control logic runs in the
// CPU tests.
//
// Semantics are CUDA's: work enqueued on one stream runs in order; work on two streams is
// ordered only through events; enqueueing returns at once and a failure of the work shows
// later (at the next query or synchronize of an event recorded after it, as a sticky
// error of its stream). Every host wait is bounded (synchronize takes a deadline). A
// stream's wait for an event is bounded by the stand-in's timeout; a GPU's is not (CUDA
// has no such bound): there the host's bounded synchronize and the collectives' abort()
// end a wait for a peer that never comes.
//
// Not for: tensors and dtypes of a framework (the adapters map torch tensors to
// pointers), choosing a backend per response (the runtime's table).
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "kolo/types.h"
#include "transport/communicator.h"

namespace kolo::device {

// An ordered queue of work on a device (cudaStream_t). Made by its Device, used only with
// it.
class Stream {
 public:
  virtual ~Stream() = default;
};

// A point in a stream's work (cudaEvent_t): record() captures the work enqueued on a
// stream so far; the event completes when that work has. A later record() moves it. An
// event never recorded counts as complete (as CUDA's).
class Event {
 public:
  virtual ~Event() = default;
};

// What every rank of a device communicator passes to create_collectives() (NCCL's
// ncclUniqueId, 128 bytes): made on one rank, sent to the others over the control plane.
struct UniqueId {
  std::array<unsigned char, 128> bytes{};
  bool operator==(const UniqueId&) const = default;
};

// What another process of this host passes to Device::open_shared() or
// open_shared_event() (cudaIpcMemHandle_t / cudaIpcEventHandle_t, 64 bytes): made by the
// owner, sent over the control plane.
struct IpcHandle {
  std::array<unsigned char, 64> bytes{};
  bool operator==(const IpcHandle&) const = default;
};

class Collectives;

class Device {
 public:
  virtual ~Device() = default;

  // "cuda:0", "host stand-in 0": shown in logs and errors.
  virtual std::string name() const = 0;

  // Equal for two Device objects (of any processes) exactly when they drive the same
  // physical device of the same host: "host <name> <boot id> gpu <uuid>" for CUDA (it
  // names the host, so ranks that share a device share a host). NCCL
  // refuses two ranks of one communicator on one device; connect_collectives() then
  // takes the CUDA-IPC path (ipc/ipc_collectives.h).
  virtual std::string physical_id() const = 0;
  // The machine this device is on, as connect_collectives() groups ranks into hosts: its
  // name and boot id (host_id.h); the stand-in can play another.
  virtual std::string host() const = 0;

  // --- memory --------------------------------------------------------------------------
  // Device memory of `bytes` bytes (at least 256-byte aligned), released with release().
  virtual Status allocate(std::size_t bytes, void** out) = 0;
  virtual void release(void* ptr) = 0;

  // Device memory that other processes of this host can open (cudaMalloc, then
  // cudaIpcGetMemHandle), with its handle; released with release().
  virtual Status allocate_shared(std::size_t bytes, void** out, IpcHandle* handle) = 0;
  // Maps another process's shared memory into this one (cudaIpcOpenMemHandle with
  // lazy peer access), until close_shared(). Not in the process that made it (CUDA's
  // rule: it uses its own pointer).
  virtual Status open_shared(const IpcHandle& handle, void** out) = 0;
  virtual void close_shared(void* ptr) = 0;
  // An event whose records streams of other processes can wait for (cudaEventInterprocess,
  // cudaIpcGetEventHandle); a wait_event() there waits for the last record() made here
  // before it. open_shared_event() gives that process an Event for wait_event(), query()
  // and synchronize() (not for record()).
  virtual Status create_shared_event(std::unique_ptr<Event>* out, IpcHandle* handle) = 0;
  virtual Status open_shared_event(const IpcHandle& handle, std::unique_ptr<Event>* out) = 0;
  // Every process that needs `handle` (memory or event) has opened it: the stand-in
  // removes the name it is reached by, so that nothing stays behind if a process dies;
  // nothing to do on CUDA.
  virtual void unpublish(const IpcHandle& handle) { (void)handle; }

  // --- streams and events --------------------------------------------------------------
  virtual Status create_stream(std::unique_ptr<Stream>* out) = 0;
  virtual Status create_event(std::unique_ptr<Event>* out) = 0;
  // `event` marks the work enqueued on `stream` so far.
  virtual Status record(Event& event, Stream& stream) = 0;
  // Work enqueued on `stream` after this call starts once `event` (as last recorded) has
  // completed; the host does not wait. A failure of the event's stream fails `stream` too.
  virtual Status wait_event(Stream& stream, Event& event) = 0;
  // The device's own handle of `event` (a cudaEvent_t on CUDA), for a caller outside
  // kolo that orders its streams with kolo's (TensorView::ready_event,
  // Handle::device_event); valid while `event` lives.
  virtual void* native_event(Event& event) = 0;
  // wait_event() for an event the caller made and recorded on one of its own streams:
  // `native` is the device's handle (a cudaEvent_t on CUDA; on the stand-in, a HostEvent
  // given by native_event()). It must live until the wait has been enqueued.
  virtual Status wait_native_event(Stream& stream, void* native) = 0;
  // Whether `event` has completed: OK with *done, or the error of the work it marks.
  virtual Status query(Event& event, bool* done) = 0;
  // The host waits for `event` until `deadline`: OK, the error of the work it marks, or
  // kPeerFailure naming the device when the deadline passed first.
  virtual Status synchronize(Event& event, Deadline deadline) = 0;

  // --- work on a stream (asynchronous: each returns once enqueued) ----------------------
  // `bytes` bytes from src to dst, each device or host memory.
  virtual Status copy(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;
  // dst[i] = to(src[i] * factor / divisor) for i < count (common/convert.h's
  // convert_scaled: the same dtype, or float32/float64 <-> float16/bfloat16). The fusion
  // kernels: pack with prescale and compression, unpack with postscale and averaging.
  virtual Status convert(void* dst, DataType to, const void* src, DataType from, std::size_t count,
                         double factor, double divisor, Stream& stream) = 0;
  // dst[i] = op(dst[i], src[i]) for i < count (`op` not kAverage): the reductions of the
  // paths that move device memory themselves (CUDA IPC).
  virtual Status reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op,
                        Stream& stream) = 0;
  // Runs `fn` on a host thread once the work enqueued before it on `stream` has finished
  // (cudaLaunchHostFunc); later work on the stream waits for it. `fn` must not call the
  // device.
  virtual Status host_function(Stream& stream, std::function<void()> fn) = 0;

  // --- collectives ---------------------------------------------------------------------
  // A new UniqueId for one communicator (ncclGetUniqueId), on one of its ranks.
  virtual Status create_unique_id(UniqueId* out) = 0;
  // This rank's part of the communicator of `size` ranks that every rank names with `id`
  // (ncclCommInitRank, non-blocking, waited for until `deadline`).
  virtual Status create_collectives(const UniqueId& id, int rank, int size, Deadline deadline,
                                    std::unique_ptr<Collectives>* out) = 0;
};

// Device collectives over the ranks of one communicator (an ncclComm_t): NCCL's calls,
// each enqueued on a stream of the device it was made by. Every rank calls the same
// collectives in the same order (the runtime's negotiation guarantees it). Arguments are
// checked when a call is made (kInvalidArgument); failures of the work itself, such as a
// peer that never takes part, show as async_error() and as the stream's error.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // recv = op over the ranks' send (count elements each; send == recv allowed). kAverage
  // divides the sum by size() (NCCL's ncclAvg; integers truncate toward zero).
  virtual Status allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                           ReduceOp op, Stream& stream) = 0;
  // root's send (bytes) into every rank's recv (send == recv allowed; send unused off
  // root).
  virtual Status broadcast(const void* send, void* recv, std::size_t bytes, int root,
                           Stream& stream) = 0;
  // Every rank's `bytes` bytes at send, concatenated in rank order into recv.
  // (By default allgatherv() with equal parts; NCCL's has a call of its own.)
  virtual Status allgather(const void* send, void* recv, std::size_t bytes, Stream& stream) {
    return allgatherv(send, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), bytes),
                      stream);
  }
  // Rank r contributes recv_bytes[r] bytes (grouped broadcasts or sends in NCCL).
  virtual Status allgatherv(const void* send, void* recv,
                            const std::vector<std::size_t>& recv_bytes, Stream& stream) = 0;
  // send holds size() blocks of recv_count elements; rank r receives block r reduced
  // over the ranks.
  virtual Status reducescatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                               ReduceOp op, Stream& stream) = 0;
  // send_bytes[r] bytes go to rank r, recv_bytes[r] come from it, consecutive in rank
  // order (grouped ncclSend/ncclRecv).
  virtual Status alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                           const std::vector<std::size_t>& recv_bytes, Stream& stream) = 0;

  // OK, or the error that broke this communicator (ncclCommGetAsyncError): after one,
  // every later call fails with it; the owner aborts the communicator and makes a new one.
  virtual Status async_error() = 0;
  // Ends the communicator's work now (ncclCommAbort): calls under way fail, later ones
  // fail at once. Safe from any thread.
  virtual void abort() = 0;
  // abort() because of `cause` (a failure of a layer above, such as the hierarchical
  // collectives' CPU transport): where peers learn of an abort (the CUDA-IPC path), they
  // are told the cause.
  virtual void abort_with(const Status& cause) {
    (void)cause;
    abort();
  }
};

struct ConnectOptions {
  // Bytes of each half of a rank's shared region on the CUDA-IPC path (the most one
  // phase of a collective moves per rank; larger collectives go in chunks). Rounded up
  // to a multiple of 8.
  std::size_t ipc_half_bytes = std::size_t{16} << 20;
  // The bound of the CUDA-IPC path's barriers (the peer timeout); 0: the time left until
  // connect_collectives' deadline.
  double ipc_timeout_seconds = 0;
  // How messages name the ranks of `control` (names[r] for rank r; empty: r), e.g. the
  // job's ranks when `control` is a host's subset.
  std::vector<int> rank_names{};
  // KOLO_HIERARCHICAL=1: ranks on several hosts take the hierarchical device collectives
  // (hier/hier_collectives.h) even where NCCL could span the hosts itself. Without it they
  // do only where they must (host-mates that share a GPU, on several hosts).
  bool hierarchical = false;
};

// Makes one communicator over the ranks of `control` (a CPU communicator: the job's, or a
// process set's, used on this thread only, and outliving the communicator), written once
// for every device. Rank 0 gathers every rank's host() and physical_id(), then:
//   - all devices different, on one host, or on several without options.hierarchical:
//     NCCL's way: rank 0 makes the UniqueId, control_broadcast gives it to the others,
//     and every rank creates its part with create_collectives();
//   - some shared, every rank on one host: the CUDA-IPC path (ipc/ipc_collectives.h)
//     over a shared-memory segment rank 0 creates, as NCCL refuses two ranks on one GPU;
//   - several hosts, host-mates sharing a device or options.hierarchical: the
//     hierarchical collectives (hier/hier_collectives.h): this function inside each host,
//     a CPU transport across.
// Every rank gets the same decision (and the same error).
Status connect_collectives(Device& device, transport::Communicator& control, Deadline deadline,
                           std::unique_ptr<Collectives>* out, const ConnectOptions& options = {});

}  // namespace kolo::device
