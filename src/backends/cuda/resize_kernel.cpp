#include "backends/cuda/resize_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/resize.h"

namespace sampan::cuda {
namespace {

// Attribute parsing, input positions and the output-shape plan mirror ops/resize.cpp
// (whose helpers are private to it) step for step: the device kernel must pick the
// same neighbours, so the scales it is given must be the reference's to the last bit.

enum class Policy { kStretch, kNotLarger, kNotSmaller };

struct Attrs {
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoord coord = ResizeCoord::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  Policy policy = Policy::kStretch;
  bool antialias = false;
  bool exclude_outside = false;
  double cubic_a = -0.75;
  double extrapolation = 0.0;
  std::vector<int64_t> axes;  // raw attribute values; empty = all axes
};

bool IsUpsample(const ir::Node& node) {
  return node.op_type == "Upsample";
}

// Which inputs hold roi/scales/sizes: depends on op and opset.
struct InputSlots {
  int roi = -1, scales = -1, sizes = -1;
  bool scales_attr = false;  // Upsample-7: scales is an attribute
};

InputSlots Slots(const ir::Node& node, int64_t opset) {
  InputSlots s;
  if (IsUpsample(node)) {
    if (node.has_attr("scales") || node.num_inputs() < 2)
      s.scales_attr = true;
    else
      s.scales = 1;
  } else if (opset <= 10 && node.num_inputs() <= 2) {
    s.scales = 1;
  } else {
    s.roi = 1;
    s.scales = 2;
    s.sizes = 3;
  }
  return s;
}

// Invalid attributes are the reference's errors to report: they come back Unsupported
// so the node stays on the host, which fails with the reference's message.
Status ReadAttrs(const ir::Node& node, int64_t opset, Attrs* a) {
  auto bad = [&](const auto&... m) { return Unsupported(node.Label(), ": ", m...); };
  const std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest")
    a->mode = ResizeMode::kNearest;
  else if (mode == "linear" || mode == "bilinear")
    a->mode = ResizeMode::kLinear;
  else if (mode == "cubic" && !IsUpsample(node))
    a->mode = ResizeMode::kCubic;
  else
    return bad("invalid mode '", mode, "'");
  if (IsUpsample(node) || opset <= 10) {
    a->coord = ResizeCoord::kAsymmetric;
    a->nearest = ResizeNearest::kSimple;
    return Status::Ok();
  }
  const std::string coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel")
    a->coord = ResizeCoord::kHalfPixel;
  else if (coord == "half_pixel_symmetric")
    a->coord = ResizeCoord::kHalfPixelSymmetric;
  else if (coord == "asymmetric")
    a->coord = ResizeCoord::kAsymmetric;
  else if (coord == "align_corners")
    a->coord = ResizeCoord::kAlignCorners;
  else if (coord == "pytorch_half_pixel")
    a->coord = ResizeCoord::kPytorchHalfPixel;
  else if (coord == "tf_crop_and_resize")
    a->coord = ResizeCoord::kTfCropAndResize;
  else if (coord == "tf_half_pixel_for_nn")
    a->coord = ResizeCoord::kTfHalfPixelForNN;
  else
    return bad("invalid coordinate_transformation_mode '", coord, "'");
  const std::string nm = node.attr_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor")
    a->nearest = ResizeNearest::kRoundPreferFloor;
  else if (nm == "round_prefer_ceil")
    a->nearest = ResizeNearest::kRoundPreferCeil;
  else if (nm == "floor")
    a->nearest = ResizeNearest::kFloor;
  else if (nm == "ceil")
    a->nearest = ResizeNearest::kCeil;
  else
    return bad("invalid nearest_mode '", nm, "'");
  const std::string pol = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (pol == "stretch")
    a->policy = Policy::kStretch;
  else if (pol == "not_larger")
    a->policy = Policy::kNotLarger;
  else if (pol == "not_smaller")
    a->policy = Policy::kNotSmaller;
  else
    return bad("invalid keep_aspect_ratio_policy '", pol, "'");
  a->antialias = node.attr_int("antialias", 0) != 0;
  if (a->antialias && a->mode == ResizeMode::kNearest) return bad("antialias is not supported for mode 'nearest'");
  a->exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a->cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a->extrapolation = node.attr_float("extrapolation_value", 0.f);
  a->axes = node.attr_ints("axes");
  return Status::Ok();
}

struct Plan {
  Shape out;
  std::vector<double> scales;  // per dim
  std::vector<double> roi;     // 2*rank (starts, ends); empty if none
};

// Output dims above this are refused, as the reference does.
constexpr double kMaxDim = 1099511627776.0;  // 2^40

Status MakePlan(const ir::Node& node, const Attrs& a, const Shape& in, const Tensor* roi_t, const Tensor* scales_t,
                const Tensor* sizes_t, Plan* plan) {
  auto bad = [&](const auto&... m) { return Unsupported(node.Label(), ": ", m...); };
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  if (a.axes.empty()) {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  } else {
    for (int64_t ax : a.axes) {
      if (ax < -r || ax >= r) return bad("axis ", ax, " is out of range for rank ", r);
      const int64_t w = ax < 0 ? ax + r : ax;
      if (std::find(axes.begin(), axes.end(), w) != axes.end()) return bad("axes contains ", ax, " twice");
      axes.push_back(w);
    }
  }
  const size_t na = axes.size();
  plan->out = in;
  plan->scales.assign(in.size(), 1.0);
  plan->roi.clear();
  if (roi_t && a.coord == ResizeCoord::kTfCropAndResize) {
    if (static_cast<size_t>(roi_t->numel()) != 2 * na)
      return bad("roi has ", roi_t->numel(), " values, expected ", 2 * na);
    plan->roi.assign(static_cast<size_t>(2 * r), 0.0);
    for (int64_t i = 0; i < r; ++i) plan->roi[static_cast<size_t>(r + i)] = 1.0;
    for (size_t k = 0; k < na; ++k) {
      plan->roi[static_cast<size_t>(axes[k])] = ElementAsDouble(*roi_t, static_cast<int64_t>(k));
      plan->roi[static_cast<size_t>(r + axes[k])] = ElementAsDouble(*roi_t, static_cast<int64_t>(na + k));
    }
  }
  if (scales_t && sizes_t) return bad("only one of scales and sizes may be given");
  if (sizes_t) {
    if (static_cast<size_t>(sizes_t->numel()) != na)
      return bad("sizes has ", sizes_t->numel(), " values, expected ", na);
    std::vector<int64_t> sz(na);
    for (size_t k = 0; k < na; ++k) {
      sz[k] = ElementAsInt64(*sizes_t, static_cast<int64_t>(k));
      if (sz[k] < 0) return bad("sizes must be >= 0");
    }
    if (a.policy == Policy::kStretch) {
      for (size_t k = 0; k < na; ++k) {
        const size_t d = static_cast<size_t>(axes[k]);
        plan->out[d] = sz[k];
        if (in[d] > 0) plan->scales[d] = static_cast<double>(sz[k]) / static_cast<double>(in[d]);
      }
      return Status::Ok();
    }
    double s = a.policy == Policy::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
    for (size_t k = 0; k < na; ++k) {
      const size_t d = static_cast<size_t>(axes[k]);
      if (in[d] <= 0) return bad("keep_aspect_ratio_policy over an empty axis");
      const double sk = static_cast<double>(sz[k]) / static_cast<double>(in[d]);
      s = a.policy == Policy::kNotLarger ? std::min(s, sk) : std::max(s, sk);
    }
    for (size_t k = 0; k < na; ++k) {
      const size_t d = static_cast<size_t>(axes[k]);
      plan->scales[d] = s;
      const double v = s * static_cast<double>(in[d]) + 0.5;
      if (!(v < kMaxDim)) return bad("output dimension ", d, " would be ", v, " (too large)");
      plan->out[d] = static_cast<int64_t>(v);
    }
    return Status::Ok();
  }
  if (scales_t) {
    if (static_cast<size_t>(scales_t->numel()) != na)
      return bad("scales has ", scales_t->numel(), " values, expected ", na);
    for (size_t k = 0; k < na; ++k) {
      const double s = ElementAsDouble(*scales_t, static_cast<int64_t>(k));
      if (!(s > 0)) return bad("scales must be positive, got ", s);
      const size_t d = static_cast<size_t>(axes[k]);
      plan->scales[d] = s;
      const double v = std::floor(s * static_cast<double>(in[d]));
      if (!(v < kMaxDim)) return bad("scale ", s, " makes output dimension ", d, " ", v, " (too large)");
      plan->out[d] = static_cast<int64_t>(v);
    }
    return Status::Ok();
  }
  return bad("one of scales and sizes must be given");
}

class ResizeKernel : public NodeKernel {
 public:
  ResizeKernel(const ResizeParams& p, size_t elem, FloatType t, int max_taps)
      : p_(p), elem_(elem), t_(t), max_taps_(max_taps) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (p_.mode == ResizeMode::kNearest)
      SP_CUDA(LaunchResizeNearest(elem_, in[0], out[0], p_, env.stream));
    else
      SP_CUDA(LaunchResizeInterp(t_, in[0], out[0], p_, max_taps_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "resize"; }

 private:
  ResizeParams p_;
  size_t elem_;
  FloatType t_;
  int max_taps_;
};

}  // namespace

Result<KernelChoice> MakeResize(const KernelRequest& r) {
  const ir::Node& node = r.node;
  const std::vector<KernelInput>& in = r.in;
  if (in.empty() || !in[0].present || r.out.empty()) return Unsupported(node.Label(), ": no data input");
  const DType dt = in[0].dtype;
  const Shape& xs = in[0].shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  if (r.out[0].dtype != dt) return Unsupported(node.Label(), ": output type differs from the input's");
  if (rank == 0) return Unsupported(node.Label(), ": scalar input");
  if (rank > kMaxRank)
    return Unsupported(node.Label(), ": rank ", rank, " (the device kernel takes up to ", kMaxRank, ")");
  Attrs a;
  SP_RETURN_IF_ERROR(ReadAttrs(node, r.opset, &a));

  // Scales/sizes (and the crop roi) decide the output shape: they must be known here.
  const InputSlots slots = Slots(node, r.opset);
  auto host_value = [&](int i, const char* what, const Tensor** t) -> Status {
    *t = nullptr;
    if (i < 0 || static_cast<size_t>(i) >= in.size() || !in[static_cast<size_t>(i)].present) return Status::Ok();
    const KernelInput& k = in[static_cast<size_t>(i)];
    if (NumElements(k.shape) == 0) return Status::Ok();  // an empty tensor counts as absent
    if (!k.host) return Unsupported(node.Label(), ": ", what, " computed on the device (not known when lowering)");
    *t = k.host;
    return Status::Ok();
  };
  const Tensor *roi = nullptr, *scales = nullptr, *sizes = nullptr;
  Tensor scales_attr;
  if (slots.scales_attr) {
    const ir::Attribute* at = node.attr("scales");
    if (!at || at->type != ir::AttrType::kFloats) return Unsupported(node.Label(), ": missing attribute 'scales'");
    scales_attr = Tensor::FromVector(DType::kFloat32, at->floats, {static_cast<int64_t>(at->floats.size())});
    if (scales_attr.numel() > 0) scales = &scales_attr;
  } else {
    SP_RETURN_IF_ERROR(host_value(slots.scales, "scales", &scales));
  }
  SP_RETURN_IF_ERROR(host_value(slots.sizes, "sizes", &sizes));
  if (a.coord == ResizeCoord::kTfCropAndResize) SP_RETURN_IF_ERROR(host_value(slots.roi, "roi", &roi));
  Plan plan;
  SP_RETURN_IF_ERROR(MakePlan(node, a, xs, roi, scales, sizes, &plan));
  if (plan.out != r.out[0].shape)
    return Unsupported(node.Label(), ": output shape ", ShapeToString(r.out[0].shape), " differs from the computed ",
                       ShapeToString(plan.out));

  // Nearest moves elements of any type; linear/cubic accumulate in float.
  FloatType t = FloatType::kF32;
  const size_t elem = DTypeSize(dt);
  if (a.mode == ResizeMode::kNearest) {
    if (!(IsFloatDType(dt) || IsIntegerDType(dt)) || (elem != 1 && elem != 2 && elem != 4 && elem != 8))
      return Unsupported(node.Label(), ": no CUDA resize for ", DTypeName(dt));
  } else {
    SP_ASSIGN_OR_RETURN(t, FloatOf(dt, node));
  }
  const bool nhwc = r.opt.input_nhwc(0);
  if (nhwc != r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (input and output storage differ)");
  if (nhwc && rank != 4) return Unsupported(node.Label(), ": layout (channels-last rank ", rank, ")");
  if (NumElements(xs) == 0 && NumElements(plan.out) > 0)
    return Unsupported(node.Label(), ": empty input resized to a non-empty output");

  // Axes in the output's storage order (N, H, W, C for channels-last), with the
  // input's element strides in its own storage.
  std::vector<size_t> order(static_cast<size_t>(rank));
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::vector<int64_t> stride = Packed(xs);
  if (nhwc) {
    order = {0, 2, 3, 1};
    stride = {xs[1] * xs[2] * xs[3], 1, xs[3] * xs[1], xs[1]};
  }
  ResizeParams p;
  p.rank = static_cast<int>(rank);
  p.mode = a.mode;
  p.coord = a.coord;
  p.nearest = a.nearest;
  p.antialias = a.antialias;
  p.exclude_outside = a.exclude_outside;
  p.cubic_a = a.cubic_a;
  for (int& i : p.interp) i = -1;
  int max_taps = 1;
  const bool linear = a.mode == ResizeMode::kLinear;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t d = order[k];
    ResizeAxis& ax = p.axis[k];
    ax.in = xs[d];
    ax.out = plan.out[d];
    ax.in_stride = stride[d];
    ax.scale = plan.scales[d];
    ax.out_w = ax.scale * static_cast<double>(ax.in);
    if (!plan.roi.empty()) {
      ax.roi_start = plan.roi[d];
      ax.roi_end = plan.roi[static_cast<size_t>(rank) + d];
    }
    // The reference leaves an axis alone only when nothing about it changes.
    const bool crop = !plan.roi.empty() && (ax.roi_start != 0.0 || ax.roi_end != 1.0);
    ax.resized = !(ax.in == ax.out && ax.scale == 1.0 && !crop);
    if (!ax.resized || a.mode == ResizeMode::kNearest) continue;
    if (p.n_interp == kMaxResizeInterpAxes)
      return Unsupported(node.Label(), ": ", linear ? "linear" : "cubic", " resize of more than ", kMaxResizeInterpAxes,
                         " axes");
    p.interp[p.n_interp++] = static_cast<int>(k);
    if (!a.antialias) {
      ax.taps = linear ? 2 : 4;
      ax.start = linear ? 0 : -1;
    } else {
      // The filter widens by 1/scale when downscaling (ops/resize.cpp's ComputeTaps).
      const double s = std::min(ax.scale, 1.0);
      const double first = std::floor((linear ? -1.0 : -2.0) / s) + 1;
      if (!(2 - 2 * first <= kMaxResizeTaps))
        return Unsupported(node.Label(), ": antialias filter of ", 2 - 2 * first, " taps at scale ", ax.scale,
                           " (the device kernel takes up to ", kMaxResizeTaps, ")");
      ax.start = static_cast<int>(first);
      ax.taps = 2 - 2 * ax.start;
      ax.aa_scale = s;
    }
    max_taps = std::max(max_taps, ax.taps);
  }
  // The value written outside a tf_crop_and_resize region, converted as the reference
  // converts its double result (integers rounded to nearest).
  p.extrapolation = static_cast<float>(a.extrapolation);
  if (a.mode == ResizeMode::kNearest) {
    const double v = IsIntegerDType(dt) ? std::nearbyint(a.extrapolation) : a.extrapolation;
    const Tensor e = Tensor::FromVector<double>(dt, {v}, {1});
    std::memcpy(&p.extrapolation_bits, e.raw(), elem);
  }
  return KernelChoice{false, std::make_unique<ResizeKernel>(p, elem, t, max_taps)};
}

}  // namespace sampan::cuda
