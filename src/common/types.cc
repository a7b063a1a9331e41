// Implementation of the public value types in include/kolo/types.h.
#include "kolo/types.h"

#include <limits>

#include "common/shape.h"

namespace kolo {

std::size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt8:
      return 1;
    case DataType::kUInt8:
      return 1;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kBool:
      return 1;
  }
  return 0;
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kBool:
      return "bool";
  }
  return "unknown-dtype";
}

const char* device_kind_name(DeviceKind kind) { return kind == DeviceKind::kCPU ? "cpu" : "cuda"; }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown-op";
}

std::int64_t shape_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<std::int64_t>::max();
  }
  return n;
}

std::size_t row_bytes(const std::vector<std::int64_t>& shape, DataType dtype) {
  std::size_t n = dtype_size(dtype);
  for (std::size_t i = 1; i < shape.size(); ++i) n *= static_cast<std::size_t>(shape[i]);
  return n;
}

std::int64_t TensorView::numel() const { return shape_numel(shape); }

Tensor::Tensor(DataType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  bytes_.resize(static_cast<std::size_t>(shape_numel(shape_)) * dtype_size(dtype_));
}

std::int64_t Tensor::numel() const { return shape_numel(shape_); }

TensorView Tensor::view() {
  TensorView v;
  v.data = bytes_.data();
  v.dtype = dtype_;
  v.shape = shape_;
  return v;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace kolo
