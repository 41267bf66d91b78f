// Shape, Size, ConstantOfShape, Range: shape arithmetic. Shape and Size set
// their output value during inference whenever the needed dims are known, so
// values propagate to later nodes (Gather/Concat/Reshape of shapes).
#include <cmath>
#include <cstring>

#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

// ---------------------------------------------------------------- Shape

Status InferShape(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, DType::kInt64, ir::Dims{ir::Dim::Unknown()});
    return Status::Ok();
  }
  const int64_t r = static_cast<int64_t>(in->size());
  int64_t start = 0, end = r;
  if (ctx.opset() >= 15) {
    start = ctx.node().attr_int("start", 0);
    end = ctx.node().attr_int("end", r);
  }
  auto clamp = [r](int64_t v) {
    if (v < 0) v += r;
    return v < 0 ? 0 : (v > r ? r : v);
  };
  start = clamp(start);
  end = clamp(end);
  const int64_t len = end > start ? end - start : 0;
  std::vector<int64_t> values;
  for (int64_t i = start; i < start + len; ++i) {
    const ir::Dim& d = (*in)[static_cast<size_t>(i)];
    if (!d.known()) {
      ctx.set_output(0, DType::kInt64, ir::Dims{ir::Dim::Known(len)});
      return Status::Ok();
    }
    values.push_back(d.value);
  }
  ctx.set_output_value(0, Tensor::FromVector(DType::kInt64, values, Shape{len}));
  return Status::Ok();
}

Status RunUnreachable(KernelContext& ctx) {
  return Internal(ctx.node.Label(), ": output value should have been set by inference");
}

// ---------------------------------------------------------------- Size

Status InferSize(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (auto s = ctx.input_static_shape(0)) {
    ctx.set_output_value(0, Tensor::FromVector(DType::kInt64, std::vector<int64_t>{NumElements(*s)}, Shape{}));
  } else {
    ctx.set_output(0, DType::kInt64, ir::Dims{});
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- ConstantOfShape

Result<Tensor> FillValue(const InferContext& ctx) {
  const ir::Attribute* a = ctx.node().attr("value");
  if (a == nullptr) return Tensor::FromVector(DType::kFloat32, std::vector<float>{0.f}, Shape{1});
  if (a->type != ir::AttrType::kTensor) return ctx.Error("attribute 'value' must be a tensor");
  if (!IsStorableDType(a->t.dtype())) return ctx.NotSupported("value of type ", DTypeName(a->t.dtype()));
  if (a->t.numel() != 1) return ctx.Error("attribute 'value' must have exactly one element, got ", a->t.Describe());
  return a->t;
}

Status InferConstantOfShape(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_ASSIGN_OR_RETURN(Tensor value, FillValue(ctx));
  const DType dt = value.dtype();
  if (ctx.input_dtype(0) != DType::kInt64) return ctx.Error("input must be int64, got ", DTypeName(ctx.input_dtype(0)));
  if (ctx.input_rank(0) > 1) return ctx.Error("input must be 1-D");
  const Tensor* v = ctx.input_value(0);
  if (v == nullptr) {
    int64_t n = StaticLength1D(ctx, 0);
    ctx.set_output(0, dt, n >= 0 ? std::optional<ir::Dims>(UnknownDims(n)) : std::nullopt);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(ctx, *v, "shape"));
  for (int64_t d : shape)
    if (d < 0) return ctx.Error("shape has a negative dimension ", d);
  ctx.set_output(0, dt, DimsOf(shape));
  return Status::Ok();
}

Status RunConstantOfShape(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(Tensor value, FillValue(*ctx.infer));
  Tensor& y = ctx.out(0);
  const size_t esize = DTypeSize(y.dtype());
  const int64_t n = y.numel();
  bool zero = true;
  const auto* vb = static_cast<const unsigned char*>(value.raw());
  for (size_t i = 0; i < esize; ++i) zero &= vb[i] == 0;
  if (zero) return Status::Ok();  // preallocated outputs are zero-filled
  auto* dst = static_cast<unsigned char*>(y.mutable_raw());
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + static_cast<size_t>(i) * esize, vb, esize);
  return Status::Ok();
}

// ---------------------------------------------------------------- Range

Result<int64_t> RangeLength(const InferContext& ctx, const Tensor& s, const Tensor& l, const Tensor& d) {
  if (IsFloatDType(s.dtype())) {
    const double start = ElementAsDouble(s, 0), limit = ElementAsDouble(l, 0), delta = ElementAsDouble(d, 0);
    if (delta == 0) return ctx.Error("delta must not be 0");
    const double n = std::ceil((limit - start) / delta);
    if (!(n >= 0)) return int64_t{0};  // also NaN
    if (n > 1e12) return ctx.Error("range of ", n, " elements is too large");
    return static_cast<int64_t>(n);
  }
  const int64_t start = ElementAsInt64(s, 0), limit = ElementAsInt64(l, 0), delta = ElementAsInt64(d, 0);
  if (delta == 0) return ctx.Error("delta must not be 0");
  const __int128 diff = static_cast<__int128>(limit) - start;
  __int128 n = 0;
  if (diff > 0 && delta > 0)
    n = (diff + delta - 1) / delta;
  else if (diff < 0 && delta < 0)
    n = (diff + delta + 1) / delta;
  return static_cast<int64_t>(n);
}

// Range-27 adds float16/bfloat16, computed in the precision that stash_type
// names (1: float, 11: double) and rounded to T once per element.
Result<DType> RangeStashType(const InferContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  const bool has = ctx.node().has_attr("stash_type");
  if (has && ctx.opset() < 27)
    return ctx.Error("attribute 'stash_type' of Range needs opset 27 (the model imports opset ", ctx.opset(), ")");
  if (dt != DType::kFloat16 && dt != DType::kBFloat16) return dt;
  const int64_t stash = ctx.node().attr_int("stash_type", static_cast<int64_t>(DType::kFloat32));
  if (stash != static_cast<int64_t>(DType::kFloat32) && stash != static_cast<int64_t>(DType::kFloat64))
    return ctx.NotSupported("attribute stash_type=", stash, ": only 1 (float) and 11 (double) are implemented");
  return static_cast<DType>(stash);
}

Status InferRange(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  if (ctx.opset() >= 27) {
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0,
                                   {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt16,
                                    DType::kInt32, DType::kInt64}));
  } else {
    SP_RETURN_IF_ERROR(
        ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt16, DType::kInt32, DType::kInt64}));
  }
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  SP_RETURN_IF_ERROR(RangeStashType(ctx).status());
  const DType dt = ctx.input_dtype(0);
  const Tensor* s = ctx.input_value(0);
  const Tensor* l = ctx.input_value(1);
  const Tensor* d = ctx.input_value(2);
  const char* names[] = {"start", "limit", "delta"};
  const Tensor* vals[] = {s, l, d};
  for (int i = 0; i < 3; ++i) {
    if (ctx.input_rank(i) > 1 || (vals[i] && vals[i]->numel() != 1)) return ctx.Error(names[i], " must be a scalar");
  }
  if (s == nullptr || l == nullptr || d == nullptr) {
    ctx.set_output(0, dt, ir::Dims{ir::Dim::Unknown()});
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(int64_t n, RangeLength(ctx, *s, *l, *d));
  ctx.set_output(0, dt, ir::Dims{ir::Dim::Known(n)});
  return Status::Ok();
}

template <class C, class T>
void FillRange(T* out, int64_t n, double start, double delta) {
  const C s = static_cast<C>(start), d = static_cast<C>(delta);
  for (int64_t i = 0; i < n; ++i) out[i] = ConvertElement<T>(static_cast<C>(s + static_cast<C>(i) * d));
}

Status RunRange(KernelContext& ctx) {
  const Tensor& s = ctx.in(0);
  const Tensor& d = ctx.in(2);
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  const bool stash_double = ctx.node.attr_int("stash_type", 1) == static_cast<int64_t>(DType::kFloat64);
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T>) {
      const double start = ElementAsDouble(s, 0), delta = ElementAsDouble(d, 0);
      if (stash_double)
        FillRange<double>(y.mutable_data<T>(), n, start, delta);
      else
        FillRange<float>(y.mutable_data<T>(), n, start, delta);
    } else if constexpr (std::is_floating_point_v<T>) {
      FillRange<double>(y.mutable_data<T>(), n, ElementAsDouble(s, 0), ElementAsDouble(d, 0));
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const int64_t start = ElementAsInt64(s, 0), delta = ElementAsInt64(d, 0);
      T* out = y.mutable_data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + i * delta);
    }
  });
}

SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Shape", .infer = InferShape, .run = RunUnreachable, .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Size", .infer = InferSize, .run = RunUnreachable, .strings = true});
SAMPAN_REGISTER_OP("ConstantOfShape", InferConstantOfShape, RunConstantOfShape);
SAMPAN_REGISTER_OP("Range", InferRange, RunRange);

}  // namespace
}  // namespace sampan::ops
