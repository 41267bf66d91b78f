// Reductions over the middle axis of an [outer, r, inner] view: the ONNX Reduce*
// ops and ArgMax/ArgMin. The factory (reduce_kernel.cpp) brings any set of reduced
// axes into that form (merging adjacent dims, or permuting into its workspace first).
// Two kernel shapes: inner == 1 reduces contiguous rows (a few lanes, a warp or a block
// per row, 16-byte loads, shuffles); inner > 1 gives each thread one (outer, inner)
// column and walks r with loads coalesced across inner (a small inner with few columns
// takes the row kernel over strided rows instead). Few long rows/columns are cut into
// `splits` chunks whose partial results a second kernel combines.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace sampan::cuda {

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp, kArgMax, kArgMin };

//! Element types of the reduction and scan kernels: f16/bf16 accumulate in f32, f32 sums in f64
//! (max/min, ArgMax/ArgMin and LogSumExp in f32), integers in 64 bits (sums and products wrap like
//! the reference's int64 accumulator cast back to the type).
enum class NumType { kF32, kF16, kBF16, kI32, kI64 };

struct ReduceParams {
  ReduceOp op = ReduceOp::kSum;
  NumType type = NumType::kF32;
  int64_t outer = 1, r = 1, inner = 1;
  bool select_last = false;  //!< ArgMax/ArgMin: the last of equal extremes instead of the first
  //! Set by PlanReduce. r is cut into `splits` chunks of `chunk` elements (the last may be
  //! shorter), each reduced into a partial result in the workspace; a second kernel combines
  //! them. `lanes`: threads per (column, chunk) of the row kernel (1..32 or a block of 256),
  //! 0 for the column kernel (a thread per column).
  int splits = 1;
  int64_t chunk = 0;
  int lanes = -1;
};

//! Whether `op` has a kernel for element type `t` (integers: no L2, LogSum, LogSumExp).
bool ReduceSupported(ReduceOp op, NumType t);
//! Chooses the kernel, lanes and splits for p's shape (host arithmetic only, no device query);
//! LaunchReduce refuses parameters it did not plan.
void PlanReduce(ReduceParams* p);
//! Scratch bytes LaunchReduce needs in `partials` (0 without splits).
size_t ReduceWorkspace(const ReduceParams& p);
//! y [outer, inner] (type p.type, int64 for ArgMax/ArgMin) = reduction of x [outer, r, inner]
//! over r. r == 0 gives the reduction's identity (sum 0, max -inf, mean NaN...) like the reference.
cudaError_t LaunchReduce(const ReduceParams& p, const void* x, void* y, void* partials, cudaStream_t stream);

}  // namespace sampan::cuda
