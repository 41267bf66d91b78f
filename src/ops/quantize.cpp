// QuantizeLinear and DequantizeLinear (opsets 10..28: per-tensor, per-axis and blocked scales;
// 8/16-bit integer, 2/4-bit integer, float8, float4 and float6 quantized types; float8e8m0
// scales; `saturate`, `output_dtype`, `precision`) and DynamicQuantizeLinear (uint8).
// Arithmetic follows onnx's reference: the division happens in the NumPy promotion of x's and
// the scale's types (or `precision`), the dequantizing subtraction in float32 (float64 for
// int32 inputs) and the multiplication in the promotion of that and the scale's type.
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/small_types.h"
#include "ops/common.h"
#include "ops/fused.h"

namespace sampan::ops {
namespace {

// QuantizeLinear outputs and DequantizeLinear inputs (DequantizeLinear also takes int32).
bool IsQuantType(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kUInt4:
    case DType::kInt4:
    case DType::kUInt2:
    case DType::kInt2:
    case DType::kFloat4E2M1:
    case DType::kFloat6E2M3:
    case DType::kFloat6E3M2:
      return true;
    default:
      return false;
  }
}
// Types the arithmetic is done in (float64 is a Sampan extension: the same formulas, wider).
bool IsComputeFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}
bool IsScaleType(DType t) {
  return IsComputeFloat(t) || t == DType::kFloat8E8M0;
}
bool IsFloat8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E4M3FNUZ || t == DType::kFloat8E5M2 ||
         t == DType::kFloat8E5M2FNUZ;
}

// Quantized types (and e8m0 scales) newer than the node's opset are errors, as in the schemas.
// sampan::QuantizeLinear / sampan::DequantizeLinear have the newest opset's semantics whatever the
// model's opset (the optimizer writes them: implicit FP8 quantization of an opset-17 export).
Status CheckTypeOpset(const InferContext& ctx, DType t, const char* what) {
  if (ctx.node().domain == kSampanDomain) return Status::Ok();
  if (const int64_t since = FirstOpsetWithType(t); ctx.opset() < since)
    return ctx.Error(what, " type ", DTypeName(t), " needs opset ", since, " (model: ", ctx.opset(), ")");
  return Status::Ok();
}

// v rounded to nearest even in float type t (exact for float64).
double RoundTo(DType t, double v) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<float>(v);
    case DType::kFloat16:
      return static_cast<float>(Half(static_cast<float>(v)));
    case DType::kBFloat16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    default:
      return v;
  }
}

// Every element of t as double (exact for every type but 64-bit integers).
std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  const bool typed = DispatchDType(t.dtype(), [&]<class T>() {
                       const T* p = t.data<T>();
                       for (size_t i = 0; i < v.size(); ++i)
                         v[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
                     }).ok();
  if (!typed)
    for (size_t i = 0; i < v.size(); ++i) v[i] = ElementAsDouble(t, static_cast<int64_t>(i));
  return v;
}

// How scale element indices map onto x: x viewed as [outer, axis_len, inner].
struct ScaleMap {
  enum Kind { kTensor, kAxis, kBlocked } kind = kTensor;
  int64_t outer = 1, axis_len = 1, inner = 1, block = 0, scale_axis_len = 1;
  int64_t Index(int64_t o, int64_t a, int64_t i) const {
    switch (kind) {
      case kTensor:
        return 0;
      case kAxis:
        return a;
      default:
        return (o * scale_axis_len + a / block) * inner + i;
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
    // A one-element zero point of another rank than a one-element scale is accepted (onnx's
    // node tests pair a scalar scale with a [1] zero point).
    auto single = [](const ir::Dims& d) {
      return std::all_of(d.begin(), d.end(), [](const ir::Dim& x) { return x.known() && x.value == 1; });
    };
    if (sd && zd && !(single(*sd) && single(*zd))) {
      if (sd->size() != zd->size()) return ctx.Error("zero point rank ", zd->size(), " != scale rank ", sd->size());
      for (size_t d = 0; d < sd->size(); ++d)
        if ((*sd)[d].known() && (*zd)[d].known() && (*sd)[d].value != (*zd)[d].value)
          return ctx.Error("zero point shape does not match scale shape");
    }
  }
  if (!sd) return Status::Ok();
  if (block == 0) {
    if (sd->size() > 1) return ctx.Error("scale must be a scalar or 1-D without block_size, got rank ", sd->size());
    // A one-element scale is per tensor whatever `axis` says (onnxruntime writes axis=1 on 1-D
    // per-tensor bias scales, and reads them: the axis is only used per axis).
    if (sd->size() == 1 && xd && !((*sd)[0].known() && (*sd)[0].value == 1)) {
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

// The scale (and zero point) index of every element of x, in x's order.
std::vector<size_t> ScaleIndices(const ScaleMap& m) {
  std::vector<size_t> idx(static_cast<size_t>(m.outer * m.axis_len * m.inner));
  size_t k = 0;
  for (int64_t o = 0; o < m.outer; ++o)
    for (int64_t a = 0; a < m.axis_len; ++a)
      for (int64_t i = 0; i < m.inner; ++i) idx[k++] = static_cast<size_t>(m.Index(o, a, i));
  return idx;
}

// The zero points (input 2) as doubles, zeros when omitted; float8 zero points must be 0 (onnx's
// reference ignores them when quantizing and refuses others when dequantizing).
Result<std::vector<double>> ZeroPoints(const KernelContext& ctx, size_t n) {
  if (!ctx.has_input(2)) return std::vector<double>(n, 0.0);
  std::vector<double> zp = AsDoubles(ctx.in(2));
  if (IsFloat8(ctx.in(2).dtype()))
    for (double z : zp)
      if (z != 0) return ctx.Error("a float8 zero point must be 0, got ", z);
  return zp;
}

// ---- QuantizeLinear -------------------------------------------------------------

// The type x / y_scale is computed in: `precision` when given, else NumPy's promotion of the two.
DType QuotientType(DType x, DType scale, int64_t precision) {
  if (precision != 0) return static_cast<DType>(precision);
  if (x == DType::kInt32 || x == DType::kFloat64 || scale == DType::kFloat64) return DType::kFloat64;
  if (x == DType::kFloat32 || scale == DType::kFloat32) return DType::kFloat32;
  if (x == scale) return x;
  if (x == DType::kBFloat16 && scale == DType::kFloat8E8M0) return DType::kBFloat16;
  return DType::kFloat32;  // float16 with bfloat16 or e8m0
}

Status InferQuantize(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  const DType xt = ctx.input_dtype(0);
  if (!IsComputeFloat(xt) && xt != DType::kInt32)
    return ctx.NotSupported("input type ", DTypeName(xt), " is not supported");
  const DType st = ctx.input_dtype(1);
  if (!IsScaleType(st)) return ctx.NotSupported("scale type ", DTypeName(st), " is not supported");
  SP_RETURN_IF_ERROR(CheckTypeOpset(ctx, st, "scale"));
  DType out = DType::kUInt8;
  const int64_t out_attr = ctx.node().attr_int("output_dtype", 0);
  if (ctx.has_input(2)) {
    out = ctx.input_dtype(2);
    if (out_attr != 0 && out_attr != static_cast<int64_t>(out))
      return ctx.Error("output_dtype ", out_attr, " does not match zero point type ", DTypeName(out));
  } else if (out_attr != 0) {
    if (out_attr < 0 || out_attr > INT32_MAX || !IsKnownDType(static_cast<int32_t>(out_attr)))
      return ctx.Error("output_dtype ", out_attr, " is not an element type");
    out = static_cast<DType>(out_attr);
  }
  if (!IsQuantType(out)) return ctx.NotSupported("quantized type ", DTypeName(out), " is not supported");
  SP_RETURN_IF_ERROR(CheckTypeOpset(ctx, out, "quantized"));
  if (const int64_t p = ctx.node().attr_int("precision", 0); p != 0) {
    if (p < 0 || p > INT32_MAX || !IsKnownDType(static_cast<int32_t>(p)) || !IsComputeFloat(static_cast<DType>(p)))
      return ctx.NotSupported("precision ", p, " (supported: float32, float16, bfloat16, float64)");
  }
  if (const int64_t sat = ctx.node().attr_int("saturate", 1); sat != 0 && sat != 1)
    return ctx.Error("saturate must be 0 or 1, got ", sat);
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
  const DType out = y.dtype();
  const DType p = QuotientType(x.dtype(), scale.dtype(), ctx.node.attr_int("precision", 0));
  const bool saturate = ctx.node.attr_int("saturate", 1) != 0;
  std::vector<double> sc = AsDoubles(scale);
  for (double& v : sc) v = RoundTo(p, v);
  SP_ASSIGN_OR_RETURN(std::vector<double> zp, ZeroPoints(ctx, sc.size()));
  const std::vector<double> xs = AsDoubles(x);
  const std::vector<size_t> idx = ScaleIndices(m);
  // q[k] = x / y_scale, rounded to the quotient type.
  std::vector<double> q(xs.size());
  for (size_t k = 0; k < q.size(); ++k) q[k] = RoundTo(p, RoundTo(p, xs[k]) / sc[idx[k]]);
  if (IsSmallFloatDType(out)) {
    // float8: zero point 0, `saturate` chooses max or inf/NaN; float4/float6: + zero point, saturating.
    for (size_t k = 0; k < q.size(); ++k) {
      const uint8_t bits = IsFloat8(out) ? SmallFloatFromDouble(out, q[k], saturate)
                                         : SmallFloatFromDouble(out, q[k] + zp[idx[k]], true);
      StoreSmallBits(y.mutable_raw(), out, static_cast<int64_t>(k), bits);
    }
    return Status::Ok();
  }
  // Integers: round half to even, add the zero point, saturate.
  double lo = 0, hi = 0;
  if (IsNarrowIntegerDType(out)) {
    lo = static_cast<double>(NarrowIntMin(out));
    hi = static_cast<double>(NarrowIntMax(out));
  } else {
    (void)DispatchDType(out, [&]<class Q>() {
      lo = static_cast<double>(std::numeric_limits<ComputeType<Q>>::lowest());
      hi = static_cast<double>(std::numeric_limits<ComputeType<Q>>::max());
    });
  }
  std::vector<int64_t> r(q.size());
  for (size_t k = 0; k < q.size(); ++k) {
    double v = std::nearbyint(q[k]) + zp[idx[k]];
    if (std::isnan(v)) v = 0;
    r[k] = static_cast<int64_t>(std::clamp(v, lo, hi));
  }
  if (IsNarrowIntegerDType(out)) {
    for (size_t k = 0; k < r.size(); ++k)
      StoreSmallBits(y.mutable_raw(), out, static_cast<int64_t>(k), NarrowIntWrap(out, r[k]));
    return Status::Ok();
  }
  return DispatchDType(out, [&]<class Q>() {
    if constexpr (std::is_integral_v<Q>) {
      Q* py = y.mutable_data<Q>();
      for (size_t k = 0; k < r.size(); ++k) py[k] = static_cast<Q>(r[k]);
    }
  });
}

// ---- DequantizeLinear -------------------------------------------------------------

Status InferDequantize(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  const DType xt = ctx.input_dtype(0);
  if (!IsQuantType(xt) && xt != DType::kInt32)
    return ctx.NotSupported("quantized type ", DTypeName(xt), " is not supported");
  SP_RETURN_IF_ERROR(CheckTypeOpset(ctx, xt, "quantized"));
  if (ctx.has_input(2) && ctx.input_dtype(2) != xt)
    return ctx.Error("zero point type ", DTypeName(ctx.input_dtype(2)), " != input type ", DTypeName(xt));
  const DType st = ctx.input_dtype(1);
  if (!IsScaleType(st)) return ctx.NotSupported("scale type ", DTypeName(st), " is not supported");
  SP_RETURN_IF_ERROR(CheckTypeOpset(ctx, st, "scale"));
  DType out = st;
  if (const int64_t oa = ctx.node().attr_int("output_dtype", 0); oa != 0) {
    if (oa < 0 || oa > INT32_MAX || !IsKnownDType(static_cast<int32_t>(oa)) || !IsComputeFloat(static_cast<DType>(oa)))
      return ctx.NotSupported("output_dtype ", oa, " is not supported");
    out = static_cast<DType>(oa);
  } else if (!IsComputeFloat(st)) {
    return ctx.Error("a ", DTypeName(st), " scale needs output_dtype (the output cannot be ", DTypeName(st), ")");
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
  const std::vector<double> sc = AsDoubles(scale);
  SP_ASSIGN_OR_RETURN(std::vector<double> zp, ZeroPoints(ctx, sc.size()));
  const std::vector<double> xs = AsDoubles(x);
  const std::vector<size_t> idx = ScaleIndices(m);
  // x - zero_point in float32, but float64 for int32 x with an int32 zero point (x itself first
  // rounded to float32, as x.astype(float32) does); the product in float64 when either factor is.
  const bool wide_diff = x.dtype() == DType::kInt32 && ctx.has_input(2);
  const bool wide = wide_diff || scale.dtype() == DType::kFloat64;
  std::vector<double> v(xs.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const size_t s = idx[k];
    const float xf = static_cast<float>(xs[k]);
    if (wide) {
      const double diff =
          wide_diff ? static_cast<double>(xf) - zp[s] : static_cast<double>(xf - static_cast<float>(zp[s]));
      v[k] = diff * sc[s];
    } else {
      v[k] = (xf - static_cast<float>(zp[s])) * static_cast<float>(sc[s]);
    }
  }
  return DispatchDType(y.dtype(), [&]<class F>() {
    if constexpr (kIsReducedFloat<F> || std::is_floating_point_v<F>) {
      F* py = y.mutable_data<F>();
      for (size_t k = 0; k < v.size(); ++k)
        py[k] = wide ? ConvertElement<F>(v[k]) : ConvertElement<F>(static_cast<float>(v[k]));
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
SAMPAN_REGISTER_DOMAIN_OP("sampan", "QuantizeLinear", InferQuantize, RunQuantize);
SAMPAN_REGISTER_DOMAIN_OP("sampan", "DequantizeLinear", InferDequantize, RunDequantize);

}  // namespace
}  // namespace sampan::ops
