// CumSum (opset 11) and CumProd (opset 26): running sum / product along the axis
// given by input 1 (a 0-D or 1-element int32/int64 tensor). exclusive=1 leaves
// out the current element (the first output is 0, resp. 1), reverse=1 runs from
// the end.
#include "ops/elementwise_util.h"
#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

Status InferScan(InferContext& ctx, std::initializer_list<DType> allowed) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, allowed));
  const DType at = ctx.input_dtype(1);
  if (at != DType::kInt32 && at != DType::kInt64)
    return ctx.Error("'axis' must be int32 or int64, got ", DTypeName(at));
  if (ctx.input_rank(1) > 1) return ctx.Error("'axis' must be a scalar, got rank ", ctx.input_rank(1));
  const int64_t rank = ctx.input_rank(0);
  if (rank == 0) return ctx.Error("input must have rank >= 1 (there is no axis to run along)");
  if (const Tensor* a = ctx.input_value(1)) {
    if (a->numel() != 1) return ctx.Error("'axis' must be a scalar (or 1 element), got ", a->Describe());
    if (rank > 0) SP_RETURN_IF_ERROR(NormalizeAxis(ctx, ElementAsInt64(*a, 0), rank).status());
  }
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status InferCumSum(InferContext& ctx) {
  return InferScan(ctx, kNumericTypes);
}

Status InferCumProd(InferContext& ctx) {
  if (ctx.opset() < 26)
    return ctx.Error("CumProd is defined from opset 26 (the model imports opset ", ctx.opset(), ")");
  return InferScan(ctx, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                         DType::kInt64, DType::kUInt32, DType::kUInt64});
}

// Walks x along the node's axis, forward or reversed. For each line it starts
// from `init` and calls acc = step(acc, x[k]); y[k] = store(acc) is written
// after the step (inclusive) or before it (exclusive).
template <class T, class Acc, class Step, class Store>
Status ScanAxis(KernelContext& ctx, Acc init, Step step, Store store) {
  const Tensor& x = ctx.in(0);
  const int64_t rank = x.rank();
  const int64_t axis = WrapAxis(ElementAsInt64(ctx.in(1), 0), rank);
  if (axis < 0 || axis >= rank) return ctx.Error("axis ", axis, " is out of range for rank ", rank);
  const bool exclusive = ctx.node.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node.attr_int("reverse", 0) != 0;
  const AxisSplit s = SplitAtAxis(x.shape(), axis);
  const T* px = x.data<T>();
  T* py = ctx.out(0).mutable_data<T>();
  std::vector<Acc> acc(static_cast<size_t>(s.inner));
  for (int64_t o = 0; o < s.outer; ++o) {
    std::fill(acc.begin(), acc.end(), init);
    const int64_t base = o * s.n * s.inner;
    for (int64_t t = 0; t < s.n; ++t) {
      const int64_t k = reverse ? s.n - 1 - t : t;
      const T* xr = px + base + k * s.inner;
      T* yr = py + base + k * s.inner;
      for (int64_t i = 0; i < s.inner; ++i) {
        Acc& a = acc[static_cast<size_t>(i)];
        if (exclusive) yr[i] = store(a);
        a = step(a, xr[i]);
        if (!exclusive) yr[i] = store(a);
      }
    }
  }
  return Status::Ok();
}

Status RunCumSum(KernelContext& ctx) {
  Status st;
  SP_RETURN_IF_ERROR(DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = AccType<T>;
      using C = ComputeType<T>;
      st = ScanAxis<T>(
          ctx, Acc(0), [](Acc a, T v) { return static_cast<Acc>(a + static_cast<Acc>(static_cast<C>(v))); },
          [](Acc a) {
            if constexpr (std::is_floating_point_v<Acc>)
              return ConvertElement<T>(static_cast<C>(a));
            else
              return static_cast<T>(a);
          });
    }
  }));
  return st;
}

// Every partial product is rounded to T (NumPy's cumprod with dtype=T does the
// same); integers wrap.
Status RunCumProd(KernelContext& ctx) {
  Status st;
  SP_RETURN_IF_ERROR(DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (kIsFloatElem<T>) {
      using C = ComputeType<T>;
      st = ScanAxis<T>(
          ctx, ConvertElement<T>(1.0),
          [](T a, T v) { return ConvertElement<T>(static_cast<C>(a) * static_cast<C>(v)); }, [](T a) { return a; });
    } else if constexpr (kIsIntElem<T>) {
      st = ScanAxis<T>(
          ctx, T(1), [](T a, T v) { return WrapMul(a, v); }, [](T a) { return a; });
    }
  }));
  return st;
}

SAMPAN_REGISTER_OP("CumSum", InferCumSum, RunCumSum);
SAMPAN_REGISTER_OP("CumProd", InferCumProd, RunCumProd);

}  // namespace
}  // namespace sampan::ops
