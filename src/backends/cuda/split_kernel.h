// Kernel factories of the data-movement ops that are strided copies of one input:
// Split (one copy per output, family "split"), Tile (family "tile"), and
// DepthToSpace / SpaceToDepth (a rank-6 transpose, family "transpose").
#pragma once

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {

//! Split, every opset form (attribute or input `split`, `num_outputs`, uneven last chunk):
//! the sizes come from the outputs' concrete shapes. Any element type of 1/2/4/8 bytes.
Result<KernelChoice> MakeSplit(const KernelRequest& r);
//! Tile: the repeats are read off the input and output shapes, so they need not be host-known.
Result<KernelChoice> MakeTile(const KernelRequest& r);
//! DepthToSpace (DCR or CRD) on a 4-D NCHW tensor.
Result<KernelChoice> MakeDepthToSpace(const KernelRequest& r);
//! SpaceToDepth on a 4-D NCHW tensor.
Result<KernelChoice> MakeSpaceToDepth(const KernelRequest& r);

}  // namespace sampan::cuda
