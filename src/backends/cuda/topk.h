// TopK along one axis of x viewed as [outer, n, inner]: the k first elements of
// each row in the reference's order (largest: descending; smallest: ascending;
// NaN above every number either way; equal values by lower index), with their
// int64 indices. Bitonic sorts of (key, index) items in shared memory: one block
// per row when the row fits one tile; for longer rows a block per tile keeps the
// tile's best k (rounded up to a power of two) and a block per row sorts those
// candidates; when they do not fit one tile either (large k), one block per row
// sorts the whole row, merging tiles through a per-block buffer in the workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace sampan::cuda {

//! Element types TopK is instantiated for.
enum class TopKType { kF32, kF16, kBF16, kF64, kI32, kI64 };

//! Where the rows lie in x and what to take from each.
struct TopKShape {
  int64_t outer = 1, n = 0, inner = 1;  //!< x as [outer, n, inner]; the rows are outer x inner
  int64_t k = 0;
  bool largest = true;
};

//! Workspace bytes LaunchTopK needs for `s` (0 when every row fits one shared-memory tile).
size_t TopKWorkspace(TopKType t, const TopKShape& s);

//! values (x's type, [outer, k, inner]) and indices (int64, same shape); either may be null.
cudaError_t LaunchTopK(TopKType t, const void* x, void* values, int64_t* indices, const TopKShape& s, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream);

}  // namespace sampan::cuda
