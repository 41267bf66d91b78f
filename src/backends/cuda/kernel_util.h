// Host-side helpers the kernel factories share: element types, packed and
// broadcast strides, and the dim-merging StridedShape builder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_types.h"
#include "base/status.h"
#include "base/tensor.h"
#include "ir/graph.h"

namespace sampan::cuda {

//! The float kernel type of `t`; Unsupported (naming the node) for other types.
Result<FloatType> FloatOf(DType t, const ir::Node& node);
//! Row-major element strides of `s`.
std::vector<int64_t> Packed(const Shape& s);
//! Strides of `in` broadcast to `out` (right-aligned, 0 where broadcast).
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);
//! Merges adjacent dims that are contiguous for every operand (up to 3), so index math stays short.
Result<StridedShape> MakeStrided(const Shape& dims, const std::vector<std::vector<int64_t>>& strides);
//! Element strides, in logical dim order, of a value of logical shape `s` as stored:
//! packed, or for a channels-last 4-D value (layout.h) those of its [N, H, W, C] memory.
std::vector<int64_t> StorageStrides(const Shape& s, bool nhwc);
//! StorageStrides(in, nhwc) broadcast to `out` (right-aligned, 0 where broadcast).
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out, bool nhwc);
//! MakeStrided over the logical shape `dims` with operand strides in logical order,
//! visiting dims in [N, H, W, C] order when `nhwc_order` (a channels-last destination
//! is then written contiguously).
Result<StridedShape> MakeStridedFor(const Shape& dims, bool nhwc_order,
                                    const std::vector<std::vector<int64_t>>& strides);
//! Strided copy (LaunchStridedCopy) of a 4-D tensor of logical shape `nchw` from NCHW memory to
//! NHWC memory, or with `to_nhwc` false the other way.
Result<StridedShape> LayoutCopy(const Shape& nchw, bool to_nhwc);

//! `b` rounded up to 256 bytes: where a kernel's workspace is cut into buffers.
inline size_t Aligned(size_t b) {
  return (b + 255) / 256 * 256;
}

//! A fused node's `activation` and `activation_params` (ops::ReadActivation) as a UnaryOp and
//! its parameters; Unsupported, with the parser's reason, when they do not parse.
Status ActivationOf(const ir::Node& node, UnaryOp* op, float* p0, float* p1);

}  // namespace sampan::cuda
