// The sampan::FusedConvPool node kernel (conv_pool_kernel.cpp): our fused stem kernel
// (conv_pool.h) or, when the builder times it faster, the convolution and the pool apart.
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

Result<KernelChoice> MakeConvPool(const KernelRequest& r);

}  // namespace sampan::cuda
