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

}  // namespace sampan::cuda
