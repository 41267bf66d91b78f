// CumSum on the device: running sums along the middle axis of an [outer, n, inner]
// view, optionally exclusive (each output leaves out its own element) and reversed
// (summing from the end). f16/bf16 accumulate in f32, f32 in f64, integers in 64 bits
// (wrapping like the reference's int64 accumulator cast back to the type).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/reduce.h"

namespace sampan::cuda {

struct CumSumParams {
  NumType type = NumType::kF32;
  int64_t outer = 1, n = 1, inner = 1;
  bool exclusive = false;
  bool reverse = false;
  //! Set by PlanCumSum. `rows`: a block scans each contiguous row (inner == 1), else a thread
  //! each (outer, inner) column. With splits > 1, n is cut into chunks of `chunk` elements:
  //! one pass sums each chunk, a small one turns the sums into carry-ins (workspace), and
  //! the scan then runs every chunk in parallel, so few long rows/columns fill the GPU.
  bool rows = false;
  int splits = 1;
  int64_t chunk = 0;
};

//! Chooses rows/columns and splits for p's shape (host arithmetic only, no device query).
void PlanCumSum(CumSumParams* p);
//! Scratch bytes LaunchCumSum needs in `workspace` (0 without splits).
size_t CumSumWorkspace(const CumSumParams& p);
//! y = cumsum(x) along n; x and y are [outer, n, inner] of p.type; p planned by PlanCumSum.
cudaError_t LaunchCumSum(const CumSumParams& p, const void* x, void* y, void* workspace, cudaStream_t stream);

}  // namespace sampan::cuda
