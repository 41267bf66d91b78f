// The ConvTranspose node kernel (conv_transpose.cpp): cuDNN's backward-data convolution
// (legacy API), with x as dy, W [C_in, C_out/group, k...] as the filter and y as dx.
// Geometry cuDNN cannot express directly (asymmetric or negative pads, an output larger
// than output_padding allows) is computed into a workspace buffer of a symmetric
// geometry and cropped/zero-padded into y with a strided copy; the bias is added after.
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! ConvTranspose 1-D/2-D/3-D, f32/f16/bf16 (TF32 when opt.tf32), NCHW storage, with the
//! reference's pads/auto_pad/output_padding/output_shape semantics. Family "cudnn deconv".
//! Tactics are cuDNN backward-data algorithm ids ("algo=N"); opt.check_only validates
//! without creating descriptors (no kernel in the choice).
Result<KernelChoice> MakeConvTranspose(const KernelRequest& r);

}  // namespace sampan::cuda
