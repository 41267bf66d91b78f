// Kernels of the ops that write a pattern over their whole output: OneHot, Trilu
// and Range. Each is output-driven (every element written once, no fill pass).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace sampan::cuda {

//! Element types OneHot reads its indices as (floats truncate toward zero, as a Cast).
enum class IndexType { kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kF16, kBF16, kF32, kF64 };
//! Range output types (the reference's).
enum class RangeType { kF32, kF64, kI16, kI32, kI64 };

//! OneHot: out[o, j, i] ([outer, depth, inner]) = values[1] where index[o, i] (wrapped from
//! [-depth, depth)) is j, else values[0]; `elem_size` is the values' element size.
cudaError_t LaunchOneHot(IndexType it, size_t elem_size, const void* indices, const void* values, void* out,
                         int64_t outer, int64_t depth, int64_t inner, cudaStream_t stream);

//! Trilu over `mats` [rows, cols] matrices: keeps j - i >= k (upper) or <= k (lower), zeros the rest.
//! k is `k_device[0]` when that is given, `k` otherwise.
cudaError_t LaunchTrilu(size_t elem_size, const void* x, void* y, int64_t mats, int64_t rows, int64_t cols, int64_t k,
                        const int64_t* k_device, bool upper, cudaStream_t stream);

//! Range: out[i] = start + i * delta for i < n, start and delta scalars on the device (floats in
//! double, then rounded, as the reference does).
cudaError_t LaunchRange(RangeType t, const void* start, const void* delta, void* out, int64_t n, cudaStream_t stream);

}  // namespace sampan::cuda
