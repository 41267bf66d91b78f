// Row views along dim 0, for code that splits a batch into its requests' rows (the server's
// batcher, an ensemble's fan-out). Kept out of tensor.h, which every file includes.
#pragma once

#include <cstdint>

#include "base/tensor.h"

namespace sampan {

//! Rows [begin, begin + count) of `t` (rank >= 1) along dim 0: a view of t's storage (string
//! tensors too: their storage is an array of std::string), which keeps that storage alive.
Tensor RowSlice(const Tensor& t, int64_t begin, int64_t count);

}  // namespace sampan
