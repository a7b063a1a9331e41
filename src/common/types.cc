// Implementation of the public value types in include/kolo/types.h.
#include <numeric>

#include "kolo/types.h"

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

static std::int64_t product(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1},
                         [](std::int64_t a, std::int64_t b) { return a * b; });
}

std::int64_t TensorView::numel() const { return product(shape); }

Tensor::Tensor(DataType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  bytes_.resize(static_cast<std::size_t>(product(shape_)) * dtype_size(dtype_));
}

std::int64_t Tensor::numel() const { return product(shape_); }

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
