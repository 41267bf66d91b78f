// Tile as a modulo walk, for the shapes whose (repeat, extent) split of every dim
// does not fit a StridedShape (more than kMaxRank dims): each output index reads
// input index (i_d % in_dims[d]) along every dim.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! Output dims (outermost first) with the input's extent and element stride along each.
struct TileShape {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_dims[kMaxRank] = {};
  int64_t in_stride[kMaxRank] = {};
};

//! dst (packed, shape out_dims) = src tiled; `elem_size` 1, 2, 4 or 8 bytes.
cudaError_t LaunchTile(size_t elem_size, const void* src, void* dst, const TileShape& shape, cudaStream_t stream);

}  // namespace sampan::cuda
