// Resize (opset 10, 11-19 semantics) and Upsample (opset 7-9).
// Separable: per resized axis a list of (input index, weight) taps per output
// index is computed once, then applied axis by axis on a double buffer.
// Coordinate math follows the ONNX reference implementation.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/common.h"

namespace sampan::ops {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kAsymmetric,
  kAlignCorners,
  kPytorchHalfPixel,
  kTfCropAndResize,
  kTfHalfPixelForNN
};
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class Policy { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Nearest nearest = Nearest::kRoundPreferFloor;
  Policy policy = Policy::kStretch;
  bool antialias = false;
  bool exclude_outside = false;
  double cubic_a = -0.75;
  double extrapolation = 0.0;
  std::vector<int64_t> axes;  // raw attribute values; empty = all axes
};

// Which inputs hold what: depends on op and opset.
struct ResizeInputs {
  int roi = -1, scales = -1, sizes = -1;
  bool scales_attr = false;  // Upsample-7: scales is an attribute
};

bool IsUpsample(const ir::Node& node) {
  return node.op_type == "Upsample";
}

ResizeInputs InputLayout(const ir::Node& node, int64_t opset) {
  ResizeInputs in;
  if (IsUpsample(node)) {
    if (node.has_attr("scales") || node.num_inputs() < 2)
      in.scales_attr = true;
    else
      in.scales = 1;
  } else if (opset <= 10 && node.num_inputs() <= 2) {
    in.scales = 1;
  } else {
    in.roi = 1;
    in.scales = 2;
    in.sizes = 3;
  }
  return in;
}

Status ReadResizeAttrs(const ir::Node& node, int64_t opset, ResizeAttrs* a) {
  auto err = [&](const auto&... m) { return InvalidArgument(node.Label(), ": ", m...); };
  const std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest")
    a->mode = Mode::kNearest;
  else if (mode == "linear" || mode == "bilinear")
    a->mode = Mode::kLinear;
  else if (mode == "cubic" && !IsUpsample(node))
    a->mode = Mode::kCubic;
  else
    return err("invalid mode '", mode, "'");
  const bool legacy = IsUpsample(node) || opset <= 10;
  if (legacy) {
    a->coord = Coord::kAsymmetric;
    a->nearest = Nearest::kSimple;
    return Status::Ok();
  }
  const std::string coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel")
    a->coord = Coord::kHalfPixel;
  else if (coord == "half_pixel_symmetric")
    a->coord = Coord::kHalfPixelSymmetric;
  else if (coord == "asymmetric")
    a->coord = Coord::kAsymmetric;
  else if (coord == "align_corners")
    a->coord = Coord::kAlignCorners;
  else if (coord == "pytorch_half_pixel")
    a->coord = Coord::kPytorchHalfPixel;
  else if (coord == "tf_crop_and_resize")
    a->coord = Coord::kTfCropAndResize;
  else if (coord == "tf_half_pixel_for_nn")
    a->coord = Coord::kTfHalfPixelForNN;
  else
    return err("invalid coordinate_transformation_mode '", coord, "'");
  const std::string nm = node.attr_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor")
    a->nearest = Nearest::kRoundPreferFloor;
  else if (nm == "round_prefer_ceil")
    a->nearest = Nearest::kRoundPreferCeil;
  else if (nm == "floor")
    a->nearest = Nearest::kFloor;
  else if (nm == "ceil")
    a->nearest = Nearest::kCeil;
  else
    return err("invalid nearest_mode '", nm, "'");
  const std::string pol = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (pol == "stretch")
    a->policy = Policy::kStretch;
  else if (pol == "not_larger")
    a->policy = Policy::kNotLarger;
  else if (pol == "not_smaller")
    a->policy = Policy::kNotSmaller;
  else
    return err("invalid keep_aspect_ratio_policy '", pol, "'");
  a->antialias = node.attr_int("antialias", 0) != 0;
  if (a->antialias && a->mode == Mode::kNearest)
    return Unsupported(node.Label(), ": antialias is not supported for mode 'nearest'");
  a->exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a->cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a->extrapolation = node.attr_float("extrapolation_value", 0.f);
  a->axes = node.attr_ints("axes");
  return Status::Ok();
}

// The resolved plan for concrete (or partly known) input dims.
struct ResizePlan {
  std::vector<int64_t> out;    // -1 where unknown
  std::vector<double> scales;  // per dim
  std::vector<double> roi;     // 2*rank (start..., end...); empty if none
  std::vector<char> resized;   // per dim: listed in axes (all dims without axes)
  bool from_sizes = false;
};

// `in` has -1 for unknown dims. Values may be null (unknown). `have_values`
// reports whether the output dims could be determined at all.
// Output dimensions above this are refused (and a double beyond int64 would be UB to convert).
constexpr double kMaxDim = 1099511627776.0;  // 2^40

Status MakePlan(const ir::Node& node, const ResizeAttrs& a, const std::vector<int64_t>& in, const Tensor* roi_t,
                const Tensor* scales_t, const Tensor* sizes_t, bool scales_unknown, bool sizes_unknown,
                ResizePlan* plan, bool* have_values) {
  auto err = [&](const auto&... m) { return InvalidArgument(node.Label(), ": ", m...); };
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  if (a.axes.empty()) {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  } else {
    for (int64_t ax : a.axes) {
      if (ax < -r || ax >= r) return err("axis ", ax, " is out of range for rank ", r);
      const int64_t w = ax < 0 ? ax + r : ax;
      for (int64_t prev : axes)
        if (prev == w) return err("axes contains ", ax, " twice");
      axes.push_back(w);
    }
  }
  const size_t na = axes.size();
  plan->out.assign(static_cast<size_t>(r), -1);
  plan->scales.assign(static_cast<size_t>(r), 1.0);
  plan->roi.clear();
  plan->resized.assign(static_cast<size_t>(r), 0);
  for (int64_t ax : axes) plan->resized[static_cast<size_t>(ax)] = 1;
  plan->from_sizes = false;
  *have_values = false;
  for (int64_t i = 0; i < r; ++i) plan->out[static_cast<size_t>(i)] = in[static_cast<size_t>(i)];
  if (roi_t && roi_t->numel() > 0 && a.coord == Coord::kTfCropAndResize) {
    if (static_cast<size_t>(roi_t->numel()) != 2 * na)
      return err("roi has ", roi_t->numel(), " values, expected ", 2 * na);
    plan->roi.resize(static_cast<size_t>(2 * r));
    for (int64_t i = 0; i < r; ++i) {
      plan->roi[static_cast<size_t>(i)] = 0.0;
      plan->roi[static_cast<size_t>(r + i)] = 1.0;
    }
    for (size_t k = 0; k < na; ++k) {
      plan->roi[static_cast<size_t>(axes[k])] = ElementAsDouble(*roi_t, static_cast<int64_t>(k));
      plan->roi[static_cast<size_t>(r + axes[k])] = ElementAsDouble(*roi_t, static_cast<int64_t>(na + k));
    }
  }
  const bool has_scales = scales_t && scales_t->numel() > 0;
  const bool has_sizes = sizes_t && sizes_t->numel() > 0;
  if (has_scales && has_sizes) return err("only one of scales and sizes may be given");
  if (has_sizes) {
    plan->from_sizes = true;
    if (static_cast<size_t>(sizes_t->numel()) != na)
      return err("sizes has ", sizes_t->numel(), " values, expected ", na);
    std::vector<int64_t> sz(na);
    for (size_t k = 0; k < na; ++k) {
      sz[k] = ElementAsInt64(*sizes_t, static_cast<int64_t>(k));
      if (sz[k] < 0) return err("sizes must be >= 0");
    }
    if (a.policy == Policy::kStretch) {
      for (size_t k = 0; k < na; ++k) {
        const size_t d = static_cast<size_t>(axes[k]);
        plan->out[d] = sz[k];
        if (in[d] > 0) plan->scales[d] = static_cast<double>(sz[k]) / static_cast<double>(in[d]);
      }
    } else {
      double s = a.policy == Policy::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
      bool known = true;
      for (size_t k = 0; k < na; ++k) {
        const size_t d = static_cast<size_t>(axes[k]);
        if (in[d] <= 0) {
          known = false;
          continue;
        }
        const double sk = static_cast<double>(sz[k]) / static_cast<double>(in[d]);
        s = a.policy == Policy::kNotLarger ? std::min(s, sk) : std::max(s, sk);
      }
      for (size_t k = 0; k < na; ++k) {
        const size_t d = static_cast<size_t>(axes[k]);
        plan->scales[d] = s;
        const double v = s * static_cast<double>(in[d]) + 0.5;
        if (known && !(v < kMaxDim)) return err("output dimension ", d, " would be ", v, " (too large)");
        plan->out[d] = known ? static_cast<int64_t>(v) : -1;
      }
    }
    *have_values = true;
    return Status::Ok();
  }
  if (has_scales) {
    if (static_cast<size_t>(scales_t->numel()) != na)
      return err("scales has ", scales_t->numel(), " values, expected ", na);
    for (size_t k = 0; k < na; ++k) {
      const double s = ElementAsDouble(*scales_t, static_cast<int64_t>(k));
      if (!(s > 0)) return err("scales must be positive, got ", s);
      const size_t d = static_cast<size_t>(axes[k]);
      plan->scales[d] = s;
      const double v = std::floor(s * static_cast<double>(in[d]));
      if (in[d] >= 0 && !(v < kMaxDim)) return err("scale ", s, " makes output dimension ", d, " ", v, " (too large)");
      plan->out[d] = in[d] < 0 ? -1 : static_cast<int64_t>(v);
    }
    *have_values = true;
    return Status::Ok();
  }
  if (scales_unknown || sizes_unknown) {
    for (size_t k = 0; k < na; ++k) plan->out[static_cast<size_t>(axes[k])] = -1;
    return Status::Ok();
  }
  return err("one of scales and sizes must be given");
}

Status InferResize(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const ResizeInputs li = InputLayout(node, ctx.opset());
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, li.sizes >= 0 ? 4 : (li.scales >= 0 ? 2 : 1)));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  ResizeAttrs a;
  SP_RETURN_IF_ERROR(ReadResizeAttrs(node, ctx.opset(), &a));
  const DType dt = ctx.input_dtype(0);
  const auto& xd = ctx.input_dims(0);
  if (!xd) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  if (xd->empty()) return ctx.Error("input must have rank >= 1");
  std::vector<int64_t> in;
  for (const auto& d : *xd) in.push_back(d.known() ? d.value : -1);
  Tensor scales_attr;
  const Tensor* scales = nullptr;
  bool scales_unknown = false, sizes_unknown = false;
  if (li.scales_attr) {
    SP_ASSIGN_OR_RETURN(std::vector<float> s, [&]() -> Result<std::vector<float>> {
      const ir::Attribute* at = node.attr("scales");
      if (!at || at->type != ir::AttrType::kFloats) return ctx.Error("missing required attribute 'scales'");
      return at->floats;
    }());
    scales_attr = Tensor::FromVector(DType::kFloat32, s, {static_cast<int64_t>(s.size())});
    scales = &scales_attr;
  } else if (li.scales >= 0 && ctx.has_input(static_cast<size_t>(li.scales))) {
    scales = ctx.input_value(static_cast<size_t>(li.scales));
    if (!scales)
      scales_unknown = true;
    else if (scales->dtype() != DType::kFloat32 && scales->dtype() != DType::kFloat64 &&
             scales->dtype() != DType::kFloat16)
      return ctx.Error("scales must be a float tensor");
  }
  const Tensor* sizes = nullptr;
  if (li.sizes >= 0 && ctx.has_input(static_cast<size_t>(li.sizes))) {
    sizes = ctx.input_value(static_cast<size_t>(li.sizes));
    if (!sizes)
      sizes_unknown = true;
    else if (sizes->dtype() != DType::kInt64)
      return ctx.Error("sizes must be int64");
  }
  const Tensor* roi = li.roi >= 0 ? ctx.input_value(static_cast<size_t>(li.roi)) : nullptr;
  ResizePlan plan;
  bool have = false;
  SP_RETURN_IF_ERROR(MakePlan(node, a, in, roi, scales, sizes, scales_unknown, sizes_unknown, &plan, &have));
  ir::Dims out;
  for (size_t i = 0; i < plan.out.size(); ++i) {
    if (!plan.resized[i] || (plan.out[i] < 0 && have && plan.scales[i] == 1.0 && !plan.from_sizes))
      out.push_back((*xd)[i]);  // untouched (possibly symbolic) dim
    else
      out.push_back(plan.out[i] >= 0 ? ir::Dim::Known(plan.out[i]) : ir::Dim::Unknown());
  }
  ctx.set_output(0, dt, out);
  return Status::Ok();
}

// ---- kernel ------------------------------------------------------------------

struct AxisTaps {
  std::vector<int64_t> begin;  // out+1 offsets into idx/w
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> extrapolate;  // per output index (tf_crop_and_resize)
  bool any_extrapolate = false;
};

double CubicCoeff(double x, double A) {
  x = std::abs(x);
  const double x2 = x * x, x3 = x2 * x;
  if (x <= 1) return (A + 2) * x3 - (A + 3) * x2 + 1;
  if (x < 2) return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A;
  return 0.0;
}

AxisTaps ComputeTaps(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start, double roi_end) {
  AxisTaps t;
  t.begin.reserve(static_cast<size_t>(out + 1));
  t.extrapolate.assign(static_cast<size_t>(out), 0);
  const double out_w = scale * static_cast<double>(in);
  const double fin = static_cast<double>(in);
  std::vector<double> c;
  std::vector<int64_t> ix;
  for (int64_t x = 0; x < out; ++x) {
    t.begin.push_back(static_cast<int64_t>(t.idx.size()));
    const double xd = static_cast<double>(x);
    double xo = 0;
    switch (a.coord) {
      case Coord::kAlignCorners:
        xo = out_w == 1 ? 0.0 : xd * (fin - 1) / (out_w - 1);
        break;
      case Coord::kAsymmetric:
        xo = xd / scale;
        break;
      case Coord::kTfCropAndResize:
        xo = out_w == 1 ? (roi_end - roi_start) * (fin - 1) / 2 : xd * (roi_end - roi_start) * (fin - 1) / (out_w - 1);
        xo += roi_start * (fin - 1);
        break;
      case Coord::kPytorchHalfPixel:
        xo = out_w == 1 ? -0.5 : (xd + 0.5) / scale - 0.5;
        break;
      case Coord::kHalfPixelSymmetric: {
        const double adjustment = static_cast<double>(out) / out_w;
        const double center = fin / 2;
        xo = center * (1 - adjustment) + (xd + 0.5) / scale - 0.5;
        break;
      }
      case Coord::kTfHalfPixelForNN:
        xo = (xd + 0.5) / scale;
        break;
      case Coord::kHalfPixel:
      default:
        xo = (xd + 0.5) / scale - 0.5;
        break;
    }
    if (a.coord == Coord::kTfCropAndResize && (xo < 0 || xo > fin - 1)) {
      t.extrapolate[static_cast<size_t>(x)] = 1;
      t.any_extrapolate = true;
      continue;
    }
    auto clampi = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (a.mode == Mode::kNearest) {
      int64_t i;
      if (a.nearest == Nearest::kSimple) {
        i = scale < 1 ? static_cast<int64_t>(std::ceil(xo)) : static_cast<int64_t>(xo);
      } else {
        const double fl = std::floor(xo);
        const double ratio = xo - fl;
        const int64_t x0 = static_cast<int64_t>(fl);
        if (ratio == 0)
          i = x0;
        else if (a.nearest == Nearest::kRoundPreferFloor)
          i = ratio <= 0.5 ? x0 : x0 + 1;
        else if (a.nearest == Nearest::kRoundPreferCeil)
          i = ratio < 0.5 ? x0 : x0 + 1;
        else if (a.nearest == Nearest::kFloor)
          i = x0;
        else
          i = x0 + 1;
      }
      t.idx.push_back(clampi(i));
      t.w.push_back(1.0);
      continue;
    }
    const double fl = std::floor(xo);
    int64_t x0 = static_cast<int64_t>(fl);
    double ratio = xo - fl;
    if (ratio == 0) {
      x0 -= 1;
      ratio = 1;
    }
    c.clear();
    ix.clear();
    int64_t start;
    if (a.mode == Mode::kLinear) {
      if (!a.antialias) {
        start = 0;
        c = {1 - ratio, ratio};
      } else {
        const double s = std::min(scale, 1.0);
        start = static_cast<int64_t>(std::floor(-1 / s) + 1);
        const int64_t n = 2 - 2 * start;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = std::clamp(1 - std::abs((static_cast<double>(start + i) - ratio) * s), 0.0, 1.0);
          c.push_back(v);
          sum += v;
        }
        for (double& v : c) v /= sum;
      }
    } else {  // cubic
      const double A = a.cubic_a;
      if (!a.antialias) {
        start = -1;
        c = {((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A,
             ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
             ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1,
             ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) - 4 * A};
      } else {
        const double s = std::min(scale, 1.0);
        start = static_cast<int64_t>(std::floor(-2 / s) + 1);
        const int64_t n = 2 - 2 * start;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = CubicCoeff(s * (static_cast<double>(start + i) - ratio), A);
          c.push_back(v);
          sum += v;
        }
        for (double& v : c) v /= sum;
      }
    }
    for (size_t i = 0; i < c.size(); ++i) ix.push_back(x0 + start + static_cast<int64_t>(i));
    if (a.exclude_outside) {
      double sum = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        if (ix[i] < 0 || ix[i] >= in) c[i] = 0;
        sum += c[i];
      }
      if (sum != 0)
        for (double& v : c) v /= sum;
    }
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] == 0) continue;
      t.idx.push_back(clampi(ix[i]));
      t.w.push_back(c[i]);
    }
  }
  t.begin.push_back(static_cast<int64_t>(t.idx.size()));
  return t;
}

// dst[outer, out, inner] = taps applied to src[outer, in, inner].
void ApplyAxis(const std::vector<double>& src, int64_t outer, int64_t in, int64_t inner, const AxisTaps& t, int64_t out,
               std::vector<double>& dst) {
  dst.assign(static_cast<size_t>(outer * out * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < out; ++j) {
      double* d = dst.data() + (o * out + j) * inner;
      for (int64_t k = t.begin[static_cast<size_t>(j)]; k < t.begin[static_cast<size_t>(j) + 1]; ++k) {
        const double w = t.w[static_cast<size_t>(k)];
        const double* s = src.data() + (o * in + t.idx[static_cast<size_t>(k)]) * inner;
        if (w == 1.0)
          for (int64_t q = 0; q < inner; ++q) d[q] += s[q];
        else
          for (int64_t q = 0; q < inner; ++q) d[q] += w * s[q];
      }
    }
}

Status RunResize(KernelContext& ctx) {
  const ir::Node& node = ctx.node;
  const Tensor& x = ctx.in(0);
  const ResizeInputs li = InputLayout(node, ctx.opset);
  ResizeAttrs a;
  SP_RETURN_IF_ERROR(ReadResizeAttrs(node, ctx.opset, &a));
  Tensor scales_attr;
  const Tensor* scales = nullptr;
  if (li.scales_attr) {
    const std::vector<float> s = node.attr_floats("scales");
    scales_attr = Tensor::FromVector(DType::kFloat32, s, {static_cast<int64_t>(s.size())});
    scales = &scales_attr;
  } else if (li.scales >= 0 && ctx.has_input(static_cast<size_t>(li.scales))) {
    scales = &ctx.in(static_cast<size_t>(li.scales));
  }
  const Tensor* sizes =
      li.sizes >= 0 && ctx.has_input(static_cast<size_t>(li.sizes)) ? &ctx.in(static_cast<size_t>(li.sizes)) : nullptr;
  const Tensor* roi =
      li.roi >= 0 && ctx.has_input(static_cast<size_t>(li.roi)) ? &ctx.in(static_cast<size_t>(li.roi)) : nullptr;
  ResizePlan plan;
  bool have = false;
  SP_RETURN_IF_ERROR(MakePlan(node, a, x.shape(), roi, scales, sizes, false, false, &plan, &have));
  Tensor& y = ctx.out(0);
  if (!y.defined()) y = Tensor::Alloc(x.dtype(), plan.out);
  const int64_t r = x.rank();
  Shape cur = x.shape();
  std::vector<double> buf(static_cast<size_t>(x.numel())), tmp;
  SP_RETURN_IF_ERROR(DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      const T* px = x.data<T>();
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<double>(static_cast<ComputeType<T>>(px[i]));
    }
  }));
  std::vector<std::pair<int64_t, AxisTaps>> extrap;
  for (int64_t d = 0; d < r; ++d) {
    const size_t ds = static_cast<size_t>(d);
    const int64_t in = cur[ds], out = plan.out[ds];
    const bool crop = a.coord == Coord::kTfCropAndResize && !plan.roi.empty() &&
                      (plan.roi[ds] != 0.0 || plan.roi[static_cast<size_t>(r) + ds] != 1.0);
    if (in == out && plan.scales[ds] == 1.0 && !crop) continue;
    if (in == 0 || out == 0) {
      cur[ds] = out;
      buf.assign(static_cast<size_t>(NumElements(cur)), 0.0);
      continue;
    }
    const double rs = plan.roi.empty() ? 0.0 : plan.roi[ds];
    const double re = plan.roi.empty() ? 1.0 : plan.roi[static_cast<size_t>(r) + ds];
    AxisTaps t = ComputeTaps(a, in, out, plan.scales[ds], rs, re);
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < d; ++k) outer *= cur[static_cast<size_t>(k)];
    for (int64_t k = d + 1; k < r; ++k) inner *= cur[static_cast<size_t>(k)];
    ApplyAxis(buf, outer, in, inner, t, out, tmp);
    buf.swap(tmp);
    cur[ds] = out;
    if (t.any_extrapolate) extrap.emplace_back(d, std::move(t));
  }
  for (const auto& [d, t] : extrap) {
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < d; ++k) outer *= cur[static_cast<size_t>(k)];
    for (int64_t k = d + 1; k < r; ++k) inner *= cur[static_cast<size_t>(k)];
    const int64_t n = cur[static_cast<size_t>(d)];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j)
        if (t.extrapolate[static_cast<size_t>(j)])
          std::fill_n(buf.data() + (o * n + j) * inner, inner, a.extrapolation);
  }
  if (static_cast<int64_t>(buf.size()) != y.numel()) return Internal(node.Label(), ": resize produced wrong size");
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      T* py = y.mutable_data<T>();
      for (size_t i = 0; i < buf.size(); ++i) {
        if constexpr (std::is_integral_v<T>) {
          const double v = std::nearbyint(buf[i]);
          py[i] = ConvertElement<T>(v);
        } else {
          py[i] = ConvertElement<T>(buf[i]);
        }
      }
    }
  });
}

SAMPAN_REGISTER_OP("Resize", InferResize, RunResize);
SAMPAN_REGISTER_OP("Upsample", InferResize, RunResize);

}  // namespace
}  // namespace sampan::ops
