// ONNX Pad on the device: constant / reflect / edge / wrap, negative pads (cropping),
// any element type (bytes are moved). One thread per output element maps its index
// back to the input along each dim, as ops/tile_pad.cpp's per-axis maps do.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

//! Dims in memory order (outermost first), after merging unpadded neighbours. Along dim d,
//! output index o reads kept element j = o - lo[d] (mapped into [0, kept[d]) by the mode when
//! outside it) at input offset in_base + j * in_stride[d].
struct PadParams {
  PadMode mode = PadMode::kConstant;
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t kept[kMaxRank] = {};       //!< input elements left after cropping
  int64_t lo[kMaxRank] = {};         //!< leading pad (0 when the dim is cropped at the front)
  int64_t in_stride[kMaxRank] = {};  //!< element strides of the input
  int64_t in_base = 0;               //!< element offset of the first kept element (front cropping)
  int64_t in_numel = 0;              //!< input elements (for the 32-bit index choice)
  uint64_t value = 0;                //!< the constant, as the element's raw bits (low bytes)
};

//! y = pad(x); `elem_size` is 1, 2, 4 or 8 bytes.
cudaError_t LaunchPad(size_t elem_size, const void* x, void* y, const PadParams& p, cudaStream_t stream);

}  // namespace sampan::cuda
