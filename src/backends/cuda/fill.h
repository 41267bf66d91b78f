// Device-side pseudo-random fill, for the builder's timing buffers: a layer's inputs at
// batch 256 are hundreds of millions of elements, which a host generator takes seconds
// to make (and a PCIe copy to move) per layer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! n elements of type t at p, uniform in [lo, hi): element i is a hash of (seed, i), so a
//! fill is reproducible and independent of the launch configuration.
cudaError_t LaunchFillUniform(FloatType t, void* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace sampan::cuda
