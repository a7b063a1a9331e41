// Framework-neutral tensor types of kolo's public API.
//
// kolo's runtime never sees libtorch (or any other framework) types: callers describe
// their memory with a TensorView (pointer, dtype, shape, device) and receive results
// that kolo allocates as a Tensor. Adapters such as <kolo/torch.h> convert.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kolo {

// Element types kolo can communicate. float16/bfloat16 are reduced in float32.
enum class DataType : std::uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
};

inline constexpr int kNumDataTypes = 9;

// Bytes per element of `dtype`.
std::size_t dtype_size(DataType dtype);
// Lower-case name, e.g. "float32", used in every error message.
const char* dtype_name(DataType dtype);

// Where a tensor's memory lives. CUDA memory is handled by adapters (host staging or NCCL);
// the core only compares device kinds between ranks.
enum class DeviceKind : std::uint8_t { kCPU, kCUDA };
const char* device_kind_name(DeviceKind kind);

// Reduction applied by allreduce and reducescatter.
//   kSum      elementwise sum (logical or for bool)
//   kAverage  sum divided by the number of ranks in the process set (not defined for bool;
//             integers truncate toward zero)
//   kMin/kMax elementwise minimum/maximum (logical and/or for bool)
//   kProduct  elementwise product (logical and for bool)
enum class ReduceOp : std::uint8_t { kSum, kAverage, kMin, kMax, kProduct };
const char* reduce_op_name(ReduceOp op);

// Wire format of float32/float64 allreduces (Horovod's fp16 compression): tensors are
// converted while packed for the transport and back while unpacked. Other dtypes travel
// as they are.
enum class Compression : std::uint8_t { kNone, kFP16, kBF16 };

// A caller-owned, contiguous, row-major tensor. kolo reads or writes `data` only between
// the call that receives the view and the completion of the returned handle.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<std::int64_t> shape;       // empty = scalar (0-d, one element)
  DeviceKind device = DeviceKind::kCPU;  // the caller's tensor's device (compared between ranks)
  int device_index = 0;                  // CUDA ordinal; ignored for CPU
  // True when `data` is a host copy of a tensor on `device` (adapters stage CUDA tensors
  // through host memory); the runtime then reads and writes `data` as CPU memory.
  bool host_staged = false;
  // Device memory only (not host_staged): the device's own handle of an event (a
  // cudaEvent_t) recorded after the caller's work that produces `data`; kolo's stream
  // waits for it before reading, without the host waiting. Null: `data` is ready now. It
  // must stay valid until the operation's handle completes.
  void* ready_event = nullptr;

  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
};

// Where allgather, alltoall and reducescatter put their result when their input is device
// memory on the device path (kolo::has_device_path()): called once, on kolo's background
// thread, when the result's dtype and shape are known; it returns a view of memory on the
// input's device that holds them (the libtorch adapter allocates a tensor there and keeps
// it). The result is written there, by kolo's stream (Handle::device_event), instead of
// into Handle::output(). It may throw; the operation then fails with the message (this
// rank still takes part, so the others' collective completes).
using OutputAllocator =
    std::function<TensorView(DataType dtype, const std::vector<std::int64_t>& shape)>;

// A kolo-owned CPU tensor: the result of allgather, alltoall and reducescatter.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, std::vector<std::int64_t> shape);

  DataType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const;
  std::size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }
  // A view of this tensor's memory (valid while the tensor lives and is not resized).
  TensorView view();

 private:
  DataType dtype_ = DataType::kFloat32;
  std::vector<std::int64_t> shape_;
  std::vector<std::byte> bytes_;
};

// "[2, 3]" — used in error messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace kolo
