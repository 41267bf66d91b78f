// Kernels of the indexed data-movement ops: GatherElements, GatherND,
// ScatterElements and ScatterND (reductions through atomics).
// Indices are int32 or int64; negative ones count from the end; out-of-range ones
// set *bad_index (Gather's convention) and are skipped (gathers write zeros) rather
// than fault. Scatters with reduction "none" and repeated indices keep one of the
// updates, unspecified which (ONNX leaves it undefined; the reference keeps the last).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! How a scatter combines an update with the element it lands on (ONNX `reduction`).
enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };
//! Element types a scatter reduction is instantiated for; kBytes: reduction none, any 1/2/4/8-byte type.
enum class ScatterType { kBytes, kF32, kF16, kBF16, kF64, kI32, kI64 };

//! The data dims an index tuple addresses (GatherND / ScatterND): dims[0..k).
struct IndexedDims {
  int k = 0;
  int64_t dims[kMaxRank] = {};
};

//! GatherElements over the indices' shape (`walk.dims`): out[i] = data[off(i) + idx[i] * axis_stride]
//! where off(i) = i's coordinates dotted with walk.stride[0] (data strides, 0 on the axis).
cudaError_t LaunchGatherElements(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                                 const StridedShape& walk, int64_t axis_dim, int64_t axis_stride, int* bad_index,
                                 cudaStream_t stream);

//! ScatterElements: out (already a copy of data) at off(i) + idx[i] * axis_stride gets updates[i]
//! (combined by `red`); `walk` as in LaunchGatherElements.
cudaError_t LaunchScatterElements(ScatterType t, size_t elem_size, ScatterReduction red, const void* updates,
                                  const void* indices, bool indices_i64, void* out, const StridedShape& walk,
                                  int64_t axis_dim, int64_t axis_stride, int* bad_index, cudaStream_t stream);

//! GatherND: for each of `batches` x `per_batch` index tuples (of d.k values), copies the addressed
//! `slice` elements of the batch's data (`batch_stride` elements apart) to the next slice of out.
cudaError_t LaunchGatherND(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                           int64_t batches, int64_t per_batch, const IndexedDims& d, int64_t slice,
                           int64_t batch_stride, int* bad_index, cudaStream_t stream);

//! ScatterND: out (already a copy of data) at each of `count` index tuples' `slice` elements gets the
//! next slice of updates, combined by `red`.
cudaError_t LaunchScatterND(ScatterType t, size_t elem_size, ScatterReduction red, const void* updates,
                            const void* indices, bool indices_i64, void* out, int64_t count, const IndexedDims& d,
                            int64_t slice, int* bad_index, cudaStream_t stream);

}  // namespace sampan::cuda
