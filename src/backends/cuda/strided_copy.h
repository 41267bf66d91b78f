// One strided copy serves the data-movement ops: Transpose (permuted source
// strides), Slice (offset + scaled strides), Concat/Split (destination or source
// offset into a larger tensor), Expand (stride 0), and layout conversion.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! For every index i of shape.dims: dst[i . stride[1]] = src[i . stride[0]] (element strides).
//! `elem_size` is 1, 2, 4 or 8 bytes; pointers already include any base offset.
cudaError_t LaunchStridedCopy(size_t elem_size, const void* src, void* dst, const StridedShape& shape,
                              cudaStream_t stream);

//! A concatenation whose inputs are stored in the output's layout: the output is `outer`
//! rows of `row` elements (the concat axis and the dims inside it, in storage order); part
//! i is `outer` rows of len[i] elements, written at element offset off[i] of each output
//! row. One launch copies up to kMaxParts parts (DenseNet's 25-way concats were 25 launches).
struct ConcatRows {
  static constexpr int kMaxParts = 32;
  int parts = 0;
  const void* src[kMaxParts] = {};
  int64_t len[kMaxParts] = {};
  int64_t off[kMaxParts] = {};
  int64_t outer = 0, row = 0;
};

cudaError_t LaunchConcatRows(size_t elem_size, const ConcatRows& c, void* dst, cudaStream_t stream);

}  // namespace sampan::cuda
