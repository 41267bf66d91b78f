// Trilu (upper/lower triangle of the last two dims, diagonal offset k) and
// EyeLike (a 2-D identity-like tensor with ones on diagonal k).
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

Result<int64_t> ReadK(const ir::Node& node, const Tensor* k) {
  if (!k) return int64_t{0};
  if (k->numel() != 1) return InvalidArgument(node.Label(), ": k must be a scalar, got ", k->Describe());
  return IndexAt(*k, 0);
}

Status InferTrilu(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  if (ctx.has_input(1)) {
    if (ctx.input_dtype(1) != DType::kInt64) return ctx.Error("k must be int64, got ", DTypeName(ctx.input_dtype(1)));
    if (const Tensor* k = ctx.input_value(1)) SP_RETURN_IF_ERROR(ReadK(ctx.node(), k).status());
  }
  const auto& in = ctx.input_dims(0);
  if (in && in->size() < 2) return ctx.Error("input must have rank >= 2, got ", in->size());
  ctx.set_output(0, ctx.input_dtype(0), in);
  return Status::Ok();
}

Status RunTrilu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  SP_ASSIGN_OR_RETURN(int64_t k, ReadK(ctx.node, ctx.has_input(1) ? &ctx.in(1) : nullptr));
  const bool upper = ctx.node.attr_int("upper", 1) != 0;
  const int64_t r = x.rank();
  const int64_t R = x.dim(r - 2), C = x.dim(r - 1);
  const int64_t mats = SpanProduct(x.shape(), 0, static_cast<size_t>(r - 2));
  DispatchBySize(DTypeSize(x.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.mutable_raw());
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < R; ++i) {
        const U* s = src + (m * R + i) * C;
        U* o = dst + (m * R + i) * C;
        for (int64_t j = 0; j < C; ++j) {
          const bool keep = upper ? (j - i >= k) : (j - i <= k);
          o[j] = keep ? s[j] : U(0);
        }
      }
  });
  return Status::Ok();
}

DType EyeLikeType(const InferContext& ctx) {
  const ir::Node& n = ctx.node();
  return n.has_attr("dtype") ? static_cast<DType>(n.attr_int("dtype", 0)) : ctx.input_dtype(0);
}

Status InferEyeLike(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  const ir::Node& n = ctx.node();
  if (n.has_attr("dtype")) {
    const int64_t t = n.attr_int("dtype", 0);
    if (t < 0 || t > 1000 || !IsKnownDType(static_cast<int32_t>(t))) return ctx.Error("unknown dtype ", t);
    const DType d = static_cast<DType>(t);
    if (!IsStorableDType(d) || DTypeSize(d) == 0) return ctx.NotSupported("output type ", DTypeName(d));
  }
  const auto& in = ctx.input_dims(0);
  if (in && in->size() != 2) return ctx.Error("input must be 2-D, got rank ", in->size());
  ctx.set_output(0, EyeLikeType(ctx), in ? in : std::optional<ir::Dims>(UnknownDims(2)));
  return Status::Ok();
}

Status RunEyeLike(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  const int64_t k = ctx.node.attr_int("k", 0);
  const int64_t R = y.dim(0), C = y.dim(1);
  return DispatchDType(y.dtype(), [&]<class T>() {
    T* o = y.mutable_data<T>();
    const T one = ConvertElement<T>(1);
    for (int64_t i = 0; i < R; ++i) {
      const int64_t j = i + k;
      if (j >= 0 && j < C) o[i * C + j] = one;
    }
  });
}

SAMPAN_REGISTER_OP("Trilu", InferTrilu, RunTrilu);
SAMPAN_REGISTER_OP("EyeLike", InferEyeLike, RunEyeLike);

}  // namespace
}  // namespace sampan::ops
