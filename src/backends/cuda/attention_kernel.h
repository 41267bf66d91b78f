// The sampan::Attention node kernel (attention_kernel.cpp): the fused kernel of
// attention.cu where it applies, else cuBLASLt products around our softmax.
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

Result<KernelChoice> MakeAttention(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                                   const KernelOptions& opt, const RunEnv& env);

}  // namespace sampan::cuda
