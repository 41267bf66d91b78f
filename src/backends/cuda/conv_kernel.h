// Conv and sampan::FusedConv node kernels (conv_kernel.cpp): cuDNN with the fused
// bias/residual/activation epilogue, channels-last where the layout pass chose it.
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

Result<KernelChoice> MakeConv(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                              const KernelOptions& opt, const RunEnv& env);

}  // namespace sampan::cuda
