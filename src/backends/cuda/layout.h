// Channels-last planning. Half-precision convolutions run fastest on tensor
// cores in NHWC, so the CUDA backend stores a 4-D activation channels-last
// (logical shape still NCHW, memory [N, H, W, C]) when it flows between ops
// that read and write that layout: 2-D convolutions (x and residual z), 2-D
// pooling, global pooling (whose [N, C, 1, 1] output is the same either way)
// and ImageInput. Conversions happen only at the edges, inside those kernels
// (a convolution whose input arrives NCHW transposes it in its workspace).
#pragma once

#include <unordered_set>

#include "ir/graph.h"

namespace sampan::cuda {

//! Values the backend stores channels-last. A pure function of the graph, so the
//! builder (tactic timing) and the runtime agree; a value is in the set when its
//! producer can write NHWC, it is not a graph output, and every reader accepts NHWC.
std::unordered_set<const ir::Value*> ChannelsLastValues(const ir::Graph& graph);

}  // namespace sampan::cuda
