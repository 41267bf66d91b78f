// Kernel factories of the channel normalizations (norm.cu): inference
// BatchNormalization (NCHW or channels-last), InstanceNormalization and
// GroupNormalization (NCHW). Family "norm".
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! BatchNormalization in inference form (output 0 only): a per-channel affine map folded
//! on the device from scale, B, mean and var. Unsupported for training_mode, the extra
//! outputs, spatial=0, and channels-last storage on only one side.
Result<KernelChoice> MakeBatchNorm(const KernelRequest& r);
//! InstanceNormalization over each (n, c) plane of an NCHW tensor of rank >= 2.
Result<KernelChoice> MakeInstanceNorm(const KernelRequest& r);
//! GroupNormalization (opset 18: scale/bias per group; opset 21: per channel) over NCHW.
Result<KernelChoice> MakeGroupNorm(const KernelRequest& r);

}  // namespace sampan::cuda
