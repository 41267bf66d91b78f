// QuantizeLinear, DequantizeLinear (per-tensor, per-axis and blocked scales; 8/16/32-bit integer
// quantized types) and DynamicQuantizeLinear (uint8).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/common.h"

namespace sampan::ops {
namespace {

bool IsQuantType(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt16 || t == DType::kUInt16 || t == DType::kInt32;
}
bool IsScaleType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

// How scale element indices map onto x: x viewed as [outer, axis_len, inner].
struct ScaleMap {
  enum Kind { kTensor, kAxis, kBlocked } kind = kTensor;
  int64_t outer = 1, axis_len = 1, inner = 1, block = 0, scale_axis_len = 1;
  int64_t Index(int64_t o, int64_t a, int64_t i) const {
    switch (kind) {
      case kTensor: return 0;
      case kAxis: return a;
      default: return (o * scale_axis_len + a / block) * inner + i;
    }
  }
};

// Validates scale (input 1) / zero point (input 2) shapes against x (input 0) as far as known.
Status CheckScaleShapes(const InferContext& ctx) {
  const int64_t block = ctx.node().attr_int("block_size", 0);
  if (block < 0) return ctx.Error("block_size must be >= 0, got ", block);
  const auto& xd = ctx.input_dims(0);
  const auto& sd = ctx.input_dims(1);
  if (ctx.has_input(2)) {
    const auto& zd = ctx.input_dims(2);
    if (sd && zd) {
      if (sd->size() != zd->size()) return ctx.Error("zero point rank ", zd->size(), " != scale rank ", sd->size());
      for (size_t d = 0; d < sd->size(); ++d)
        if ((*sd)[d].known() && (*zd)[d].known() && (*sd)[d].value != (*zd)[d].value)
          return ctx.Error("zero point shape does not match scale shape");
    }
  }
  if (!sd) return Status::Ok();
  if (block == 0) {
    if (sd->size() > 1) return ctx.Error("scale must be a scalar or 1-D without block_size, got rank ", sd->size());
    if (sd->size() == 1 && xd) {
      if (xd->empty()) return ctx.Error("1-D scale needs an input of rank >= 1");
      SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 1), xd->size()));
      const ir::Dim& s = (*sd)[0];
      const ir::Dim& a = (*xd)[static_cast<size_t>(axis)];
      if (s.known() && a.known() && s.value != 1 && s.value != a.value)
        return ctx.Error("per-axis scale has ", s.value, " elements but axis ", axis, " has ", a.value);
    }
    return Status::Ok();
  }
  if (!xd) return Status::Ok();
  if (sd->size() != xd->size())
    return ctx.Error("blocked scale must have the input's rank ", xd->size(), ", got ", sd->size());
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 1), xd->size()));
  for (size_t d = 0; d < xd->size(); ++d) {
    const ir::Dim& s = (*sd)[d];
    const ir::Dim& a = (*xd)[d];
    if (!s.known() || !a.known()) continue;
    const int64_t want = static_cast<int64_t>(d) == axis ? (a.value + block - 1) / block : a.value;
    if (s.value != want) return ctx.Error("blocked scale dim ", d, " is ", s.value, ", expected ", want);
  }
  return Status::Ok();
}

Result<ScaleMap> MakeScaleMap(const KernelContext& ctx, const Tensor& x, const Tensor& scale) {
  ScaleMap m;
  const int64_t block = ctx.node.attr_int("block_size", 0);
  m.inner = x.numel();
  if (scale.numel() == 1 && block == 0) return m;
  if (x.rank() == 0) return ctx.Error("non-scalar scale needs an input of rank >= 1");
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 1), x.rank());
  if (axis < 0 || axis >= x.rank()) return ctx.Error("axis out of range");
  m.outer = 1;
  for (int64_t d = 0; d < axis; ++d) m.outer *= x.dim(d);
  m.axis_len = x.dim(axis);
  m.inner = 1;
  for (int64_t d = axis + 1; d < x.rank(); ++d) m.inner *= x.dim(d);
  if (block == 0) {
    if (scale.rank() != 1 || scale.dim(0) != m.axis_len)
      return ctx.Error("per-axis scale ", scale.Describe(), " does not match axis length ", m.axis_len);
    m.kind = ScaleMap::kAxis;
    return m;
  }
  if (scale.rank() != x.rank()) return ctx.Error("blocked scale must have the input's rank");
  for (int64_t d = 0; d < x.rank(); ++d) {
    const int64_t want = d == axis ? (x.dim(d) + block - 1) / block : x.dim(d);
    if (scale.dim(d) != want) return ctx.Error("blocked scale shape ", scale.Describe(), " does not match input");
  }
  m.kind = ScaleMap::kBlocked;
  m.block = block;
  m.scale_axis_len = scale.dim(axis);
  return m;
}

Status CheckZeroPointShape(const KernelContext& ctx, const Tensor& scale) {
  if (ctx.has_input(2) && ctx.in(2).numel() != scale.numel())
    return ctx.Error("zero point ", ctx.in(2).Describe(), " does not match scale ", scale.Describe());
  return Status::Ok();
}

// ---- QuantizeLinear -------------------------------------------------------------

Status InferQuantize(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  const DType xt = ctx.input_dtype(0);
  if (!IsScaleType(xt) && xt != DType::kInt32)
    return ctx.NotSupported("input type ", DTypeName(xt), " is not supported");
  if (!IsScaleType(ctx.input_dtype(1)))
    return ctx.NotSupported("scale type ", DTypeName(ctx.input_dtype(1)), " is not supported");
  DType out = DType::kUInt8;
  const int64_t out_attr = ctx.node().attr_int("output_dtype", 0);
  if (ctx.has_input(2)) {
    out = ctx.input_dtype(2);
    if (out_attr != 0 && out_attr != static_cast<int64_t>(out))
      return ctx.Error("output_dtype ", out_attr, " does not match zero point type ", DTypeName(out));
  } else if (out_attr != 0) {
    out = static_cast<DType>(out_attr);
  }
  if (!IsQuantType(out)) return ctx.NotSupported("quantized type ", DTypeName(out), " is not supported");
  SP_RETURN_IF_ERROR(CheckScaleShapes(ctx));
  ctx.set_output(0, out, ctx.input_dims(0));
  return Status::Ok();
}

Status RunQuantize(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& scale = ctx.in(1);
  SP_ASSIGN_OR_RETURN(ScaleMap m, MakeScaleMap(ctx, x, scale));
  SP_RETURN_IF_ERROR(CheckZeroPointShape(ctx, scale));
  Tensor& y = ctx.out(0);
  const bool wide = x.dtype() == DType::kFloat64 || x.dtype() == DType::kInt32 || scale.dtype() == DType::kFloat64;
  std::vector<double> sc(static_cast<size_t>(scale.numel()));
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = ElementAsDouble(scale, static_cast<int64_t>(i));
  std::vector<int64_t> zp(sc.size(), 0);
  if (ctx.has_input(2))
    for (size_t i = 0; i < zp.size(); ++i) zp[i] = ElementAsInt64(ctx.in(2), static_cast<int64_t>(i));
  return DispatchDType(y.dtype(), [&]<class Q>() {
    if constexpr (std::is_integral_v<Q> && !std::is_same_v<Q, bool>) {
      (void)DispatchDType(x.dtype(), [&]<class T>() {
        if constexpr (!std::is_same_v<T, bool>) {
          const T* px = x.data<T>();
          Q* py = y.mutable_data<Q>();
          constexpr double lo = static_cast<double>(std::numeric_limits<Q>::lowest());
          constexpr double hi = static_cast<double>(std::numeric_limits<Q>::max());
          int64_t k = 0;
          for (int64_t o = 0; o < m.outer; ++o)
            for (int64_t a = 0; a < m.axis_len; ++a)
              for (int64_t i = 0; i < m.inner; ++i, ++k) {
                const int64_t s = m.Index(o, a, i);
                double q;
                if (wide) {
                  q = std::nearbyint(static_cast<double>(static_cast<ComputeType<T>>(px[k])) / sc[s]);
                } else {
                  q = std::nearbyint(static_cast<float>(px[k]) / static_cast<float>(sc[s]));
                }
                q += static_cast<double>(zp[s]);
                if (std::isnan(q)) q = 0;
                py[k] = static_cast<Q>(std::clamp(q, lo, hi));
              }
        }
      });
    }
  });
}

// ---- DequantizeLinear -------------------------------------------------------------

Status InferDequantize(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  const DType xt = ctx.input_dtype(0);
  if (!IsQuantType(xt)) return ctx.NotSupported("quantized type ", DTypeName(xt), " is not supported");
  if (ctx.has_input(2) && ctx.input_dtype(2) != xt)
    return ctx.Error("zero point type ", DTypeName(ctx.input_dtype(2)), " != input type ", DTypeName(xt));
  const DType st = ctx.input_dtype(1);
  if (!IsScaleType(st)) return ctx.NotSupported("scale type ", DTypeName(st), " is not supported");
  DType out = st;
  if (const int64_t oa = ctx.node().attr_int("output_dtype", 0); oa != 0) {
    out = static_cast<DType>(oa);
    if (!IsScaleType(out)) return ctx.NotSupported("output_dtype ", oa, " is not supported");
  }
  SP_RETURN_IF_ERROR(CheckScaleShapes(ctx));
  ctx.set_output(0, out, ctx.input_dims(0));
  return Status::Ok();
}

Status RunDequantize(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& scale = ctx.in(1);
  SP_ASSIGN_OR_RETURN(ScaleMap m, MakeScaleMap(ctx, x, scale));
  SP_RETURN_IF_ERROR(CheckZeroPointShape(ctx, scale));
  Tensor& y = ctx.out(0);
  std::vector<double> sc(static_cast<size_t>(scale.numel()));
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = ElementAsDouble(scale, static_cast<int64_t>(i));
  std::vector<int64_t> zp(sc.size(), 0);
  if (ctx.has_input(2))
    for (size_t i = 0; i < zp.size(); ++i) zp[i] = ElementAsInt64(ctx.in(2), static_cast<int64_t>(i));
  const bool wide = y.dtype() == DType::kFloat64;
  return DispatchDType(y.dtype(), [&]<class F>() {
    if constexpr (kIsReducedFloat<F> || std::is_floating_point_v<F>) {
      (void)DispatchDType(x.dtype(), [&]<class Q>() {
        if constexpr (std::is_integral_v<Q> && !std::is_same_v<Q, bool>) {
          const Q* px = x.data<Q>();
          F* py = y.mutable_data<F>();
          int64_t k = 0;
          for (int64_t o = 0; o < m.outer; ++o)
            for (int64_t a = 0; a < m.axis_len; ++a)
              for (int64_t i = 0; i < m.inner; ++i, ++k) {
                const int64_t s = m.Index(o, a, i);
                if (wide) {
                  py[k] = ConvertElement<F>((static_cast<double>(px[k]) - static_cast<double>(zp[s])) * sc[s]);
                } else {
                  const float v = (static_cast<float>(px[k]) - static_cast<float>(zp[s])) * static_cast<float>(sc[s]);
                  py[k] = ConvertElement<F>(v);
                }
              }
        }
      });
    }
  });
}

// ---- DynamicQuantizeLinear ------------------------------------------------------------

Status InferDynamicQuantize(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.input_dtype(0) != DType::kFloat32)
    return ctx.NotSupported("input type ", DTypeName(ctx.input_dtype(0)), " is not supported (float32 only)");
  if (ctx.num_outputs() != 3) return ctx.Error("expects 3 outputs, got ", ctx.num_outputs());
  ctx.set_output(0, DType::kUInt8, ctx.input_dims(0));
  ctx.set_output(1, DType::kFloat32, ir::Dims{});
  ctx.set_output(2, DType::kUInt8, ir::Dims{});
  return Status::Ok();
}

Status RunDynamicQuantize(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const float* px = x.data<float>();
  const int64_t n = x.numel();
  float mn = 0.f, mx = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    mn = std::min(mn, px[i]);
    mx = std::max(mx, px[i]);
  }
  const float scale = (mx == mn ? 1.0f : (mx - mn)) / 255.0f;
  const float zp_f = std::clamp(0.0f - mn / scale, 0.0f, 255.0f);
  const float zp = std::nearbyint(zp_f);
  uint8_t* py = ctx.out(0).mutable_data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    float q = std::nearbyint(px[i] / scale) + zp;
    if (std::isnan(q)) q = 0;
    py[i] = static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
  }
  ctx.out(1).mutable_data<float>()[0] = scale;
  ctx.out(2).mutable_data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  return Status::Ok();
}

SAMPAN_REGISTER_OP("QuantizeLinear", InferQuantize, RunQuantize);
SAMPAN_REGISTER_OP("DequantizeLinear", InferDequantize, RunDequantize);
SAMPAN_REGISTER_OP("DynamicQuantizeLinear", InferDynamicQuantize, RunDynamicQuantize);

}  // namespace
}  // namespace sampan::ops
