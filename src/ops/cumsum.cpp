// CumSum: running sum along the axis given by input 1 (a 0-D or 1-element
// int32/int64 tensor). exclusive=1 leaves out the current element, reverse=1
// sums from the end.
#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

Status InferCumSum(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  const DType at = ctx.input_dtype(1);
  if (at != DType::kInt32 && at != DType::kInt64)
    return ctx.Error("'axis' must be int32 or int64, got ", DTypeName(at));
  if (const Tensor* a = ctx.input_value(1)) {
    if (a->numel() != 1 || a->rank() > 1)
      return ctx.Error("'axis' must be a scalar (or 1 element), got ", a->Describe());
    const int64_t rank = ctx.input_rank(0);
    if (rank >= 0) SP_RETURN_IF_ERROR(NormalizeAxis(ctx, ElementAsInt64(*a, 0), rank).status());
  }
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunCumSum(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t rank = x.rank();
  const int64_t axis = WrapAxis(ElementAsInt64(ctx.in(1), 0), rank);
  const bool exclusive = ctx.node.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node.attr_int("reverse", 0) != 0;
  const AxisSplit s = rank == 0 ? AxisSplit{} : SplitAtAxis(x.shape(), axis);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = AccType<T>;
      using C = ComputeType<T>;
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      std::vector<Acc> acc(static_cast<size_t>(s.inner));
      for (int64_t o = 0; o < s.outer; ++o) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        const int64_t base = o * s.n * s.inner;
        for (int64_t t = 0; t < s.n; ++t) {
          const int64_t k = reverse ? s.n - 1 - t : t;
          const T* xr = px + base + k * s.inner;
          T* yr = py + base + k * s.inner;
          for (int64_t i = 0; i < s.inner; ++i) {
            Acc& a = acc[static_cast<size_t>(i)];
            const Acc v = static_cast<Acc>(static_cast<C>(xr[i]));
            if (!exclusive) a += v;
            if constexpr (std::is_floating_point_v<Acc>) yr[i] = ConvertElement<T>(static_cast<C>(a));
            else yr[i] = static_cast<T>(a);
            if (exclusive) a += v;
          }
        }
      }
    }
  });
}

SAMPAN_REGISTER_OP("CumSum", InferCumSum, RunCumSum);

}  // namespace
}  // namespace sampan::ops
