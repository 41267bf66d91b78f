// Sum, Max, Min, Mean: n-ary element-wise ops with multidirectional broadcasting.
#include <cmath>
#include <vector>

#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

template <bool kFloatOnly>
Status InferVariadic(InferContext& ctx) {
  if (ctx.num_inputs() < 1) return ctx.Error("expects at least 1 input, got 0");
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i)) return ctx.Error("input ", i, " is missing (inputs are not optional)");
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatOnly ? kFloatTypes : kNumericTypes));
  for (size_t i = 1; i < ctx.num_inputs(); ++i) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  return InferBroadcastOutput(ctx, ctx.input_dtype(0));
}

struct SumOp {
  template <class C>
  C operator()(C a, C b) const {
    return WrapAdd(a, b);
  }
};
struct MaxOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    return a < b ? b : a;
  }
};
struct MinOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    return b < a ? b : a;
  }
};

template <class Op, bool kMean>
Status RunVariadic(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  const size_t n_in = ctx.inputs.size();
  return DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using C = ComputeType<T>;
      const int64_t total = y.numel();
      std::vector<C> tmp;
      C* acc;
      if constexpr (std::is_same_v<T, C>) {
        acc = y.mutable_data<T>();
      } else {
        tmp.resize(static_cast<size_t>(total));
        acc = tmp.data();
      }
      Op op;
      for (size_t k = 0; k < n_in; ++k) {
        const T* px = ctx.in(k).data<T>();
        const bool first = k == 0;
        ForEachBroadcastBlock<1>(
            y.shape(), {ctx.in(k).shape()},
            [&](int64_t o, const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& step, int64_t n) {
              const T* x = px + off[0];
              C* a = acc + o;
              if (first) {
                if (step[0])
                  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<C>(x[i]);
                else
                  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<C>(*x);
              } else {
                if (step[0])
                  for (int64_t i = 0; i < n; ++i) a[i] = op(a[i], static_cast<C>(x[i]));
                else
                  for (int64_t i = 0; i < n; ++i) a[i] = op(a[i], static_cast<C>(*x));
              }
            });
      }
      if constexpr (kMean) {
        const C count = static_cast<C>(n_in);
        for (int64_t i = 0; i < total; ++i) acc[i] = static_cast<C>(acc[i] / count);
      }
      if constexpr (!std::is_same_v<T, C>) {
        T* py = y.mutable_data<T>();
        for (int64_t i = 0; i < total; ++i) py[i] = ConvertElement<T>(acc[i]);
      }
    }
  });
}

SAMPAN_REGISTER_OP("Sum", InferVariadic<true>, (RunVariadic<SumOp, false>));
SAMPAN_REGISTER_OP("Mean", InferVariadic<true>, (RunVariadic<SumOp, true>));
SAMPAN_REGISTER_OP("Max", InferVariadic<false>, (RunVariadic<MaxOp, false>));
SAMPAN_REGISTER_OP("Min", InferVariadic<false>, (RunVariadic<MinOp, false>));

}  // namespace
}  // namespace sampan::ops
