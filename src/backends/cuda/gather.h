// Gather along one axis: out[o, i, k] = data[o, idx[i], k] for an [outer, axis, inner]
// view of data; negative indices count from the end; out-of-range ones are
// reported through `bad_index` (set to 1) and write zeros.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

cudaError_t LaunchGather(size_t elem_size, const void* data, const void* indices, bool indices_i64, void* out,
                         int64_t outer, int64_t axis_dim, int64_t inner, int64_t num_indices, int* bad_index,
                         cudaStream_t stream);

}  // namespace sampan::cuda
