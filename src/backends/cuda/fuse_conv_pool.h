// A lowering rewrite of the CUDA backend: a network's stem, a convolution on at most 4
// input channels (Conv or sampan::FusedConv without residual, FP16/BF16, one group, no
// dilation) whose only reader is a 2-D MaxPool without indices, becomes
// sampan::FusedConvPool (ops/fused.h): one kernel that never writes the full-resolution
// conv output (conv_pool.h), or the two kernels apart if the builder times them faster.
// ResNets, ResNeXt, Wide-ResNet and GoogLeNet start this way. Other backends keep both ops.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cuda {

//! Rewrites plan.graph in place; the fused node takes the convolution's name, the pool's
//! plan choice is dropped. One line per rewrite (also appended to plan.rewrites).
Result<std::vector<std::string>> FuseConvPool(plan::Plan& plan);

}  // namespace sampan::cuda
