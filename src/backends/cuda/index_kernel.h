// Kernel factories of the indexed data-movement ops (index_ops.cu, pattern_ops.cu,
// topk.cu; defined in index_kernel.cpp and pattern_kernel.cpp):
// GatherElements and GatherND (family "gather"), ScatterElements and ScatterND
// (family "scatter"), OneHot ("onehot"), Trilu ("trilu"), Range ("range") and
// TopK ("topk"). Where already has a device kernel (logical_op.h).
// Out-of-range indices set RunEnv::bad_index, as Gather's do.
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! GatherElements, any element type of 1/2/4/8 bytes, int32/int64 indices.
Result<KernelChoice> MakeGatherElements(const KernelRequest& r);
//! GatherND with batch_dims; the index tuples may address at most kMaxRank dims.
Result<KernelChoice> MakeGatherND(const KernelRequest& r);
//! ScatterElements (and opset 9-10 Scatter): reduction none for any 1/2/4/8-byte type;
//! add/mul/max/min for f32, f16, bf16, f64, int32 and int64 (atomics).
Result<KernelChoice> MakeScatterElements(const KernelRequest& r);
//! ScatterND, reductions as MakeScatterElements.
Result<KernelChoice> MakeScatterND(const KernelRequest& r);
//! OneHot: depth is read off the output shape; indices of any integer or float type.
Result<KernelChoice> MakeOneHot(const KernelRequest& r);
//! Trilu: k from the host when known, else read on the device.
Result<KernelChoice> MakeTrilu(const KernelRequest& r);
//! Range with device start/delta (the length is the output's concrete shape).
Result<KernelChoice> MakeRange(const KernelRequest& r);
//! TopK: k is read off the output shape; largest as the attribute says; always sorted
//! (also a valid answer for sorted=0). f32, f16, bf16, f64, int32, int64.
Result<KernelChoice> MakeTopK(const KernelRequest& r);

}  // namespace sampan::cuda
