// Sizes of shapes, computed in one way for every layer.
//
// Not for: validating shapes (negative dimensions and byte sizes past 64 bits are refused
// where a shape enters kolo: core/request_builder.cc for this rank's tensors,
// core/negotiation.cc for a peer's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo {

// The number of elements; saturates at INT64_MAX instead of overflowing, so that it is
// safe on an unchecked shape (a peer's, in a message).
std::int64_t shape_numel(const std::vector<std::int64_t>& shape);
// Bytes of one dim-0 row: the element size times every dimension but the first.
std::size_t row_bytes(const std::vector<std::int64_t>& shape, DataType dtype);

}  // namespace kolo
