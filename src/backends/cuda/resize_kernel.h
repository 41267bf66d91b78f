// The Resize / Upsample node kernel (resize_kernel.cpp, kernels in resize.cu).
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! Resize (opset 10-19 forms) and Upsample (opset 7-9): every mode, coordinate transform,
//! nearest rounding, `axes`, keep_aspect_ratio_policy and antialias that ops/resize.cpp
//! implements, with the output shape and per-axis scales worked out on the host the way
//! the reference does. Needs host-known scales/sizes (and roi for tf_crop_and_resize);
//! Unsupported (with the reason) otherwise. Family "resize"; never touches the device.
Result<KernelChoice> MakeResize(const KernelRequest& r);

}  // namespace sampan::cuda
