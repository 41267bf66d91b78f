// Where(condition, X, Y): element-wise select with three-way broadcasting.
#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

Status InferWhere(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  if (ctx.input_dtype(0) != DType::kBool)
    return ctx.Error("condition (input 0) must be bool, got ", DTypeName(ctx.input_dtype(0)));
  if (ctx.input_dtype(1) != DType::kBool) SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 1, 2));
  return InferBroadcastOutput(ctx, ctx.input_dtype(1));
}

Status RunWhere(KernelContext& ctx) {
  const Tensor& c = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& z = ctx.in(2);
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    const bool* pc = c.data<bool>();
    const T* px = x.data<T>();
    const T* pz = z.data<T>();
    T* py = y.mutable_data<T>();
    ForEachBroadcastBlock<3>(
        y.shape(), {c.shape(), x.shape(), z.shape()},
        [&](int64_t o, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& step, int64_t n) {
          const bool* bc = pc + off[0];
          const T* bx = px + off[1];
          const T* bz = pz + off[2];
          T* by = py + o;
          for (int64_t i = 0; i < n; ++i) by[i] = bc[i * step[0]] ? bx[i * step[1]] : bz[i * step[2]];
        });
  });
}

SAMPAN_REGISTER_OP("Where", InferWhere, RunWhere);

}  // namespace
}  // namespace sampan::ops
