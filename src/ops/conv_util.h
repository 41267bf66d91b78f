// Spatial geometry shared by Conv, ConvInteger and the pooling ops: reading
// kernel_shape/strides/dilations/pads/auto_pad/ceil_mode and computing output
// sizes and effective pads per spatial dimension (ONNX shape-inference rules).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

struct SpatialAttrs {
  std::vector<int64_t> kernel;     //!< one per spatial dim
  std::vector<int64_t> strides;    //!< one per spatial dim
  std::vector<int64_t> dilations;  //!< one per spatial dim
  std::vector<int64_t> pads;       //!< begin..., end... (explicit pads; NOTSET only)
  AutoPad auto_pad = AutoPad::kNotSet;
  bool ceil_mode = false;
  size_t rank() const { return kernel.size(); }
  int64_t effective_kernel(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

//! Reads strides/dilations/pads/auto_pad (and ceil_mode when `allow_ceil`) for
//! `kernel.size()` spatial dims. `kernel` must already be filled. Errors are
//! InvalidArgument naming the node and attribute.
//! Rank shared by X [N, C, spatial...] and W of a convolution. -1 when neither is
//! known (output 0 is then set to unknown rank); an error when they disagree or are < 3.
inline Result<int64_t> ConvRank(InferContext& ctx, DType out_dtype) {
  const auto& xd = ctx.input_dims(0);
  const auto& wd = ctx.input_dims(1);
  const int64_t rank = xd ? static_cast<int64_t>(xd->size()) : (wd ? static_cast<int64_t>(wd->size()) : -1);
  if (rank < 0) {
    ctx.set_output(0, out_dtype, std::nullopt);
    return rank;
  }
  if (rank < 3) return ctx.Error("input must have rank >= 3 (N, C, spatial...), got rank ", rank);
  if (xd && wd && xd->size() != wd->size()) return ctx.Error("X has rank ", xd->size(), " but W has rank ", wd->size());
  return rank;
}

//! Kernel sizes, strides, dilations and pads above this are refused: the output-size
//! arithmetic stays far from int64 overflow, and no real model comes near it.
inline constexpr int64_t kMaxSpatialAttr = int64_t{1} << 30;

inline Status ReadSpatialAttrs(const ir::Node& node, SpatialAttrs* a, bool allow_ceil, bool allow_dilations = true) {
  const size_t r = a->kernel.size();
  for (int64_t k : a->kernel)
    if (k <= 0) return InvalidArgument(node.Label(), ": kernel_shape values must be positive");
  a->strides = node.attr_ints("strides", std::vector<int64_t>(r, 1));
  if (a->strides.size() != r)
    return InvalidArgument(node.Label(), ": strides has ", a->strides.size(), " values, expected ", r);
  for (int64_t s : a->strides)
    if (s <= 0) return InvalidArgument(node.Label(), ": strides must be positive");
  a->dilations = node.attr_ints("dilations", std::vector<int64_t>(r, 1));
  if (!allow_dilations && node.has_attr("dilations")) return Unsupported(node.Label(), ": dilations are not supported");
  if (a->dilations.size() != r)
    return InvalidArgument(node.Label(), ": dilations has ", a->dilations.size(), " values, expected ", r);
  for (int64_t d : a->dilations)
    if (d <= 0) return InvalidArgument(node.Label(), ": dilations must be positive");
  const std::string ap = node.attr_string("auto_pad", "NOTSET");
  if (ap == "NOTSET" || ap.empty())
    a->auto_pad = AutoPad::kNotSet;
  else if (ap == "SAME_UPPER")
    a->auto_pad = AutoPad::kSameUpper;
  else if (ap == "SAME_LOWER")
    a->auto_pad = AutoPad::kSameLower;
  else if (ap == "VALID")
    a->auto_pad = AutoPad::kValid;
  else
    return InvalidArgument(node.Label(), ": invalid auto_pad '", ap, "'");
  a->pads.assign(2 * r, 0);
  if (a->auto_pad == AutoPad::kNotSet) {
    a->pads = node.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
    if (a->pads.size() != 2 * r)
      return InvalidArgument(node.Label(), ": pads has ", a->pads.size(), " values, expected ", 2 * r);
    for (int64_t p : a->pads)
      if (p < 0) return Unsupported(node.Label(), ": negative pads are not supported");
  }
  for (const auto* list : {&a->kernel, &a->strides, &a->dilations, &a->pads})
    for (int64_t v : *list)
      if (v > kMaxSpatialAttr)
        return InvalidArgument(node.Label(), ": kernel_shape, strides, dilations and pads must be at most ",
                               kMaxSpatialAttr, ", got ", v);
  const int64_t ceil = node.attr_int("ceil_mode", 0);
  if (ceil != 0 && ceil != 1) return InvalidArgument(node.Label(), ": ceil_mode must be 0 or 1");
  a->ceil_mode = allow_ceil && ceil == 1;
  return Status::Ok();
}

//! Output size of spatial dim i for a known input size `in`; sets the effective
//! begin/end pads. Returns -1 when the window does not fit.
inline int64_t SpatialOutDim(const SpatialAttrs& a, size_t i, int64_t in, int64_t* pb, int64_t* pe) {
  const int64_t s = a.strides[i], ek = a.effective_kernel(i);
  *pb = *pe = 0;
  switch (a.auto_pad) {
    case AutoPad::kSameUpper:
    case AutoPad::kSameLower: {
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + ek - in);
      const int64_t small = total / 2, large = total - small;
      *pb = a.auto_pad == AutoPad::kSameUpper ? small : large;
      *pe = a.auto_pad == AutoPad::kSameUpper ? large : small;
      return out;
    }
    case AutoPad::kValid:
      if (in < ek) return -1;
      return (in - ek) / s + 1;
    case AutoPad::kNotSet:
    default: {
      *pb = a.pads[i];
      *pe = a.pads[a.rank() + i];
      const int64_t span = in + *pb + *pe - ek;
      if (span < 0) return -1;
      int64_t out = span / s + 1;
      if (a.ceil_mode) {
        out = (span + s - 1) / s + 1;
        if ((out - 1) * s >= in + *pb) --out;  // the last window must start inside the input or left pad
      }
      return out;
    }
  }
}

//! Inferred dims [batch, channels, spatial...] of a conv/pool output. Unknown
//! input spatial dims give unknown output dims.
inline Result<ir::Dims> InferSpatialOutput(const InferContext& ctx, const ir::Dims& x, const SpatialAttrs& a,
                                           ir::Dim channels) {
  ir::Dims out{x[0], channels};
  for (size_t i = 0; i < a.rank(); ++i) {
    const ir::Dim& d = x[2 + i];
    if (!d.known()) {
      out.push_back(ir::Dim::Unknown());
      continue;
    }
    if (d.value > (int64_t{1} << 40)) return ctx.Error("spatial dim ", i, " of size ", d.value, " is too large");
    int64_t pb, pe;
    const int64_t o = SpatialOutDim(a, i, d.value, &pb, &pe);
    if (o < 0)
      return ctx.Error("spatial dim ", i, " of size ", d.value, " is smaller than the (dilated, padded) kernel ",
                       a.effective_kernel(i));
    out.push_back(ir::Dim::Known(o));
  }
  return out;
}

//! Concrete geometry for a kernel: input and output spatial sizes plus begin pads.
struct SpatialGeometry {
  std::vector<int64_t> in, out, pad_begin, pad_end;
  int64_t in_size = 1, out_size = 1;
};

inline SpatialGeometry ComputeGeometry(const SpatialAttrs& a, const Shape& x_shape) {
  SpatialGeometry g;
  const size_t r = a.rank();
  g.in.resize(r);
  g.out.resize(r);
  g.pad_begin.resize(r);
  g.pad_end.resize(r);
  for (size_t i = 0; i < r; ++i) {
    g.in[i] = x_shape[2 + i];
    g.out[i] = std::max<int64_t>(0, SpatialOutDim(a, i, g.in[i], &g.pad_begin[i], &g.pad_end[i]));
    g.in_size *= g.in[i];
    g.out_size *= g.out[i];
  }
  return g;
}

}  // namespace sampan::ops
