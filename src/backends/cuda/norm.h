// Channel normalizations of NCHW-style tensors (rank >= 2, channels at dim 1):
// inference BatchNormalization as a per-channel affine map whose coefficients the
// kernel folds from the four parameter vectors as it goes (no host round trip, no
// extra launch), in NCHW or channels-last storage; and InstanceNormalization /
// GroupNormalization, whose per-(n, group) statistics are reduced in float by a
// stats kernel (a group may be split over several blocks so small batches still
// fill the GPU; partials combine with Chan's formula) and applied by a second one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! Element type of a parameter vector (scale, bias, mean, var): ONNX lets it differ from X's.
enum class ParamType { kF32, kF16, kBF16, kF64 };

//! A parameter vector on the device and its element type.
struct ParamVec {
  const void* p = nullptr;
  ParamType t = ParamType::kF32;
};

//! Inference BatchNormalization: y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]
//! (float math, folded to y = x * a[c] + b[c]) over x viewed as [n, c, inner] (NCHW) or,
//! with `channels_last`, as [n * inner, c] (NHWC memory of a logical NCHW tensor).
//! `p` holds scale, bias, mean, var (c elements each).
//! `act` (with its parameters) is applied to the normalised value: sampan::FusedBatchNorm.
cudaError_t LaunchBatchNorm(FloatType t, const void* x, void* y, const ParamVec (&p)[4], int64_t n, int64_t c,
                            int64_t inner, bool channels_last, float eps, UnaryOp act, float act_p0, float act_p1,
                            cudaStream_t stream);

//! How a group-normalization reduction is spread over blocks.
struct GroupNormPlan {
  int64_t n = 0, c = 0, inner = 0, groups = 1;
  int64_t len = 0;                //!< elements per (n, group): c / groups * inner
  int64_t splits = 1;             //!< blocks per (n, group)
  int64_t chunk = 0;              //!< elements per block (a multiple of 8, so any vector width divides it)
  bool per_group_affine = false;  //!< scale/bias hold one value per group (GroupNormalization before opset 21)
  float eps = 1e-5f;
  //! Scratch bytes: (count, mean, M2) floats per (n, group, split).
  size_t workspace() const { return static_cast<size_t>(n * groups * splits) * 3 * sizeof(float); }
};

//! Chooses the split of each (n, group) region of `inner`-element channels (contiguous, NCHW).
GroupNormPlan PlanGroupNorm(int64_t n, int64_t c, int64_t inner, int64_t groups, bool per_group_affine, float eps);

//! y = (x - mean) / sqrt(var + eps) * scale + bias with mean/var over each (n, group) of x
//! (InstanceNormalization: groups = c). `workspace` holds plan.workspace() bytes.
cudaError_t LaunchGroupNorm(FloatType t, const void* x, void* y, ParamVec scale, ParamVec bias,
                            const GroupNormPlan& plan, void* workspace, cudaStream_t stream);

}  // namespace sampan::cuda
