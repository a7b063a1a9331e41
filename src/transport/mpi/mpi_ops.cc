// How kolo dtypes and reduce ops become MPI datatypes and ops, plus small formatting
// helpers for the MPI transport's error messages.
//
// Not for: averaging or scaling (the runtime does those), or reduction kernels of our
// own beyond what MPI lacks (kolo::reduce_into supplies those).
#include <cstdio>
#include <utility>

#include "common/format.h"
#include "common/reduce.h"
#include "transport/mpi/mpi_internal.h"

namespace kolo::transport::mpi {
namespace {

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return 0;
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
    case ReduceOp::kAverage:
      break;  // rejected by the callers
  }
  return 0;
}

constexpr ReduceOp kOpByIndex[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                   ReduceOp::kProduct};

// MPI calls this with slices of the buffer: inout[i] = in[i] op inout[i]. The 16-bit types
// travel as MPI_UINT16_T, so `len` counts elements.
template <DataType D, ReduceOp O>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  reduce_into(inout, in, static_cast<std::size_t>(*len), D, O);
}

template <DataType D, std::size_t... I>
int create_ops(MPI_Op* ops, std::index_sequence<I...>) {
  MPI_User_function* fns[] = {&reduce_16bit<D, kOpByIndex[I]>...};
  for (std::size_t i = 0; i < sizeof...(I); ++i) {
    // Commutative lets MPI choose its faster algorithms; implementations still give every
    // rank the same result (the standard asks them to), which the runtime relies on.
    const int rc = MPI_Op_create(fns[i], /*commute=*/1, &ops[i]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

}  // namespace

int ReduceOps::create() {
  int rc = create_ops<DataType::kFloat16>(half_, std::make_index_sequence<kOps>());
  if (rc != MPI_SUCCESS) return rc;
  return create_ops<DataType::kBFloat16>(bfloat16_, std::make_index_sequence<kOps>());
}

void ReduceOps::free() {
  for (MPI_Op* table : {half_, bfloat16_}) {
    for (int i = 0; i < kOps; ++i) {
      if (table[i] != MPI_OP_NULL) MPI_Op_free(&table[i]);
    }
  }
}

Reduction ReduceOps::lookup(DataType dtype, ReduceOp op) const {
  static const MPI_Op kBuiltin[kOps] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  const int i = op_index(op);
  switch (dtype) {
    case DataType::kFloat32:
      return {MPI_FLOAT, kBuiltin[i]};
    case DataType::kFloat64:
      return {MPI_DOUBLE, kBuiltin[i]};
    case DataType::kInt8:
      return {MPI_INT8_T, kBuiltin[i]};
    case DataType::kUInt8:
      return {MPI_UINT8_T, kBuiltin[i]};
    case DataType::kInt32:
      return {MPI_INT32_T, kBuiltin[i]};
    case DataType::kInt64:
      return {MPI_INT64_T, kBuiltin[i]};
    case DataType::kFloat16:
      return {MPI_UINT16_T, half_[i]};
    case DataType::kBFloat16:
      return {MPI_UINT16_T, bfloat16_[i]};
    case DataType::kBool:
      // MPI's logical ops give exactly kolo's bool semantics (sum/max = or, min/product =
      // and, results 0 or 1) with MPI's own vectorized loops, so no user op is needed.
      return {MPI_UINT8_T, (op == ReduceOp::kSum || op == ReduceOp::kMax) ? MPI_LOR : MPI_LAND};
  }
  return {MPI_DATATYPE_NULL, MPI_OP_NULL};
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<std::size_t>(length)) + " (MPI error " +
         std::to_string(code) + ")";
}

std::string seconds_string(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace kolo::transport::mpi
