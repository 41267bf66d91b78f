// Channels-last planning. Half-precision convolutions run fastest on tensor
// cores in NHWC, so the CUDA backend stores a 4-D activation channels-last
// (logical shape still NCHW, memory [N, H, W, C]) wherever the ops around it
// allow: each kernel family declares in the op table (node_kernel.h,
// LayoutSupport) whether it reads and writes that layout, and the region stays
// channels-last through element-wise ops, concats, slices, pads, resizes and
// per-channel norms. Conversions happen only at a region's edges, inside the
// kernels (strided reads, or a convolution's copy into its workspace).
#pragma once

#include <unordered_set>

#include "ir/graph.h"

namespace sampan::cuda {

//! Values the backend stores channels-last. A pure function of the graph, so the
//! builder (capability, tactic timing) and the runtime agree: 4-D half-precision
//! activations, never graph inputs or outputs, that every node touching them accepts
//! channels-last, in regions that hold a convolution or a raw-image input.
std::unordered_set<const ir::Value*> ChannelsLastValues(const ir::Graph& graph);

}  // namespace sampan::cuda
