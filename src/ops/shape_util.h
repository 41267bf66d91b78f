// Helpers shared by the shape/data-movement ops (reshape, transpose, slice,
// concat/split, expand, ...): a strided element copy and small checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ops/op.h"

namespace sampan::ops {

//! out[i] = in[in_offset + sum_d idx_d(i) * in_strides[d]] for every index of
//! out_shape in row-major order. Elements are `elem_size` bytes (1, 2, 4 or 8);
//! strides and offset are in elements and may be zero or negative.
void StridedCopy(const void* in, void* out, size_t elem_size, const Shape& out_shape, const Shape& in_strides,
                 int64_t in_offset);

//! Unsupported unless input i's element type can be stored (and so moved) by Sampan.
Status ExpectStorableInput(const InferContext& ctx, size_t i);

//! Reads a shape-like input value (an integer tensor) into int64s; `what` names it in errors.
Result<std::vector<int64_t>> ReadInts(const InferContext& ctx, const Tensor& t, const char* what);

//! The length of a 1-D input when its single dim is statically known, else -1.
int64_t StaticLength1D(const InferContext& ctx, size_t i);
//! The longest shape-like input (a rank) StaticLength1D reports.
inline constexpr int64_t kMaxShapeInputLength = 4096;

//! Dims of `rank` unknown entries.
inline ir::Dims UnknownDims(int64_t rank) {
  return ir::Dims(static_cast<size_t>(rank), ir::Dim::Unknown());
}

}  // namespace sampan::ops
