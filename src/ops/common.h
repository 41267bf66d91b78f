// Helpers shared by op files: axis handling, broadcasting, strides.
#pragma once

#include <array>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"
#include "ops/op.h"

namespace sampan::ops {

//! Maps a possibly negative axis into [0, rank); error names the op and axis.
Result<int64_t> NormalizeAxis(const InferContext& ctx, int64_t axis, int64_t rank);
//! Same without a context (kernels: inference already validated).
inline int64_t WrapAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

//! Row-major strides in elements.
Shape StridesOf(const Shape& shape);
//! ir::Dims of a static shape.
ir::Dims DimsOf(const Shape& shape);

//! Multidirectional (NumPy) broadcast of two dim lists; symbolic dims are kept
//! when they cannot be resolved. Error when two known dims differ and neither is 1.
Result<ir::Dims> BroadcastDims(const InferContext& ctx, const ir::Dims& a, const ir::Dims& b);
//! Broadcasts all present inputs' shapes and sets output 0 with `dtype`.
//! Unknown rank in any input gives an output of unknown rank.
Status InferBroadcastOutput(InferContext& ctx, DType dtype);
//! Static broadcast of concrete shapes (run time).
Shape BroadcastShapes(const std::vector<Shape>& shapes);

//! For each element of `out_shape`, the element offsets into each input of
//! `in_shapes` (broadcast against out_shape). Calls fn(out_index, offsets).
template <size_t N, class Fn>
void ForEachBroadcast(const Shape& out_shape, const std::array<Shape, N>& in_shapes, Fn&& fn) {
  const size_t rank = out_shape.size();
  std::array<Shape, N> strides;
  for (size_t k = 0; k < N; ++k) {
    strides[k].assign(rank, 0);
    const Shape& s = in_shapes[k];
    const size_t off = rank - s.size();
    int64_t stride = 1;
    for (size_t d = s.size(); d-- > 0;) {
      strides[k][d + off] = s[d] == 1 ? 0 : stride;
      stride *= s[d];
    }
  }
  const int64_t total = NumElements(out_shape);
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, N> offsets{};
  for (int64_t i = 0; i < total; ++i) {
    fn(i, offsets);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (index[d] < out_shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * index[d];
      index[d] = 0;
    }
  }
}

//! Checks that input i's dtype is one of `allowed`; Unsupported otherwise.
Status ExpectDType(const InferContext& ctx, size_t i, std::initializer_list<DType> allowed);
//! The numeric types the reference kernels compute in.
inline constexpr std::initializer_list<DType> kNumericTypes = {
    DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,   DType::kInt16,
    DType::kInt32,   DType::kInt64,   DType::kUInt8,   DType::kUInt16,   DType::kUInt32, DType::kUInt64};
inline constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                                             DType::kBFloat16};
//! Checks that inputs a and b have the same dtype.
Status ExpectSameDType(const InferContext& ctx, size_t a, size_t b);
//! Unifies `slot` with another occurrence `d` of the same dim (a batch size seen in
//! several inputs): a known value, else a symbol, fills an unknown slot; two known
//! values that differ are an error naming `what`.
Status UnifyDim(const InferContext& ctx, ir::Dim& slot, const ir::Dim& d, const char* what);
//! Dim d of input i; Unknown when the input's rank is unknown (the caller checked the rank).
inline ir::Dim InputDim(const InferContext& ctx, size_t i, size_t d) {
  const auto& dims = ctx.input_dims(i);
  return dims ? (*dims)[d] : ir::Dim::Unknown();
}

}  // namespace sampan::ops
