// Helpers for the data-movement ops (gather/scatter, tile/pad, one-hot, nonzero,
// depth/space, trilu, reverse-sequence): dtype-agnostic element copies, index
// tensors, strided walks.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {

//! Input i must hold a type the engine can store with a fixed byte size
//! (every numeric type and bool); Unsupported otherwise.
inline Status ExpectStorable(const InferContext& ctx, size_t i) {
  DType t = ctx.input_dtype(i);
  if (!IsStorableDType(t) || DTypeSize(t) == 0) return ctx.NotSupported("input ", i, " of type ", DTypeName(t));
  return Status::Ok();
}

//! Index inputs: int32 or int64.
inline Status ExpectIndexType(const InferContext& ctx, size_t i) {
  DType t = ctx.input_dtype(i);
  if (t != DType::kInt32 && t != DType::kInt64)
    return ctx.Error("input ", i, " (indices) must be int32 or int64, got ", DTypeName(t));
  return Status::Ok();
}

//! Calls fn.template operator()<U>() with U an unsigned integer of `size` bytes,
//! so kernels that only move elements are written once for every dtype.
template <class Fn>
void DispatchBySize(size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      fn.template operator()<uint8_t>();
      break;
    case 2:
      fn.template operator()<uint16_t>();
      break;
    case 4:
      fn.template operator()<uint32_t>();
      break;
    default:
      fn.template operator()<uint64_t>();
      break;
  }
}

//! Element i of an int32/int64 tensor.
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? static_cast<int64_t>(t.data<int32_t>()[i]) : t.data<int64_t>()[i];
}

//! Maps index `v` in [-n, n) to [0, n); nullopt when out of range.
inline std::optional<int64_t> WrapIndex(int64_t v, int64_t n) {
  if (v < -n || v >= n) return std::nullopt;
  return v < 0 ? v + n : v;
}

//! Calls fn(i, offset) for every element i (row-major) of `shape`, where offset
//! is sum(index[d] * strides[d]).
template <class Fn>
void ForEachOffset(const Shape& shape, const Shape& strides, Fn&& fn) {
  const size_t rank = shape.size();
  const int64_t total = NumElements(shape);
  if (total == 0) return;
  if (rank == 0) {  // a scalar (GCC 12 also misreads the empty index vector's delete below)
    fn(int64_t{0}, int64_t{0});
    return;
  }
  std::vector<int64_t> index(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    fn(i, off);
    for (size_t d = rank; d-- > 0;) {
      off += strides[d];
      if (++index[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

//! Product of shape[b, e).
inline int64_t SpanProduct(const Shape& shape, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < shape.size(); ++i) p *= shape[i];
  return p;
}

//! Product of dims[b, e) when all known.
inline std::optional<int64_t> KnownProduct(const ir::Dims& dims, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e && i < dims.size(); ++i) {
    if (!dims[i].known()) return std::nullopt;
    p *= dims[i].value;
  }
  return p;
}

//! `rank` unknown dims.
inline ir::Dims UnknownDims(size_t rank) {
  return ir::Dims(rank, ir::Dim::Unknown());
}

}  // namespace sampan::ops
