// Gemm: Y = alpha * op(A) * op(B) + beta * C, op = optional transpose, C
// unidirectionally broadcast to [M, N].
#include "ops/common.h"
#include "ops/gemm_util.h"

namespace sampan::ops {
namespace {

constexpr std::initializer_list<DType> kGemmTypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                                     DType::kBFloat16, DType::kInt32,   DType::kInt64,
                                                     DType::kUInt32,   DType::kUInt64};

Status InferGemm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kGemmTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  const ir::Node& node = ctx.node();
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const DType dt = ctx.input_dtype(0);
  const auto& ad = ctx.input_dims(0);
  const auto& bd = ctx.input_dims(1);
  if (ad && ad->size() != 2) return ctx.Error("A must be 2-D, got rank ", ad->size());
  if (bd && bd->size() != 2) return ctx.Error("B must be 2-D, got rank ", bd->size());
  ir::Dim m = ad ? (*ad)[ta ? 1 : 0] : ir::Dim::Unknown();
  ir::Dim ka = ad ? (*ad)[ta ? 0 : 1] : ir::Dim::Unknown();
  ir::Dim kb = bd ? (*bd)[tb ? 1 : 0] : ir::Dim::Unknown();
  ir::Dim n = bd ? (*bd)[tb ? 0 : 1] : ir::Dim::Unknown();
  if (ka.known() && kb.known() && ka.value != kb.value)
    return ctx.Error("inner dimensions differ: A gives K=", ka.value, ", B gives K=", kb.value);
  if (ctx.has_input(2) && ctx.input_dims(2)) {
    const auto& cd = *ctx.input_dims(2);
    if (cd.size() > 2) return ctx.Error("C must have rank <= 2, got rank ", cd.size());
    const ir::Dim* want[2] = {&m, &n};
    for (size_t i = 0; i < cd.size(); ++i) {
      const ir::Dim& c = cd[i];
      const ir::Dim& w = *want[2 - cd.size() + i];
      if (c.known() && c.value != 1 && w.known() && c.value != w.value)
        return ctx.Error("C is not broadcastable to [", m.value, ",", n.value, "]");
    }
  }
  ctx.set_output(0, dt, ir::Dims{m, n});
  return Status::Ok();
}

Status RunGemm(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  const Tensor* c = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  Tensor& y = ctx.out(0);
  const bool ta = ctx.node.attr_int("transA", 0) != 0, tb = ctx.node.attr_int("transB", 0) != 0;
  const float alpha = ctx.node.attr_float("alpha", 1.f), beta = ctx.node.attr_float("beta", 1.f);
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1);
  return DispatchDType(a.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, int8_t> && !std::is_same_v<T, uint8_t> &&
                  !std::is_same_v<T, int16_t> && !std::is_same_v<T, uint16_t>) {
      using A = GemmAccType<T>;
      std::vector<A> ab, bb, at, bt, acc;
      const A* pa = AsAccumType<A>(a.data<T>(), a.numel(), ab);
      const A* pb = AsAccumType<A>(b.data<T>(), b.numel(), bb);
      if (ta) {
        at.resize(static_cast<size_t>(M * K));
        TransposeInto<A>(K, M, pa, M, at.data());
        pa = at.data();
      }
      if (tb) {
        bt.resize(static_cast<size_t>(K * N));
        TransposeInto<A>(N, K, pb, K, bt.data());
        pb = bt.data();
      }
      A* py;
      if constexpr (std::is_same_v<A, T>) {
        py = y.mutable_data<T>();
      } else {
        acc.assign(static_cast<size_t>(M * N), A(0));
        py = acc.data();
      }
      GemmAccumulate<A>(M, N, K, pa, K, pb, N, py, N);
      const A al = static_cast<A>(alpha), be = static_cast<A>(beta);
      const T* pc = c ? c->data<T>() : nullptr;
      int64_t cm = 0, cn = 0;  // strides of C over (m, n)
      if (c) {
        const Shape& cs = c->shape();
        const int64_t crow = cs.size() == 2 ? cs[0] : 1;
        const int64_t ccol = cs.empty() ? 1 : cs.back();
        cn = ccol == 1 ? 0 : 1;
        cm = crow == 1 ? 0 : ccol;
      }
      T* out = y.mutable_data<T>();
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          A v = py[i * N + j];
          if (alpha != 1.f) v = static_cast<A>(al * v);
          if (pc && beta != 0.f) v = static_cast<A>(v + be * static_cast<A>(ComputeType<T>(pc[i * cm + j * cn])));
          out[i * N + j] = ConvertElement<T>(v);
        }
    }
  });
}

SAMPAN_REGISTER_OP("Gemm", InferGemm, RunGemm);

}  // namespace
}  // namespace sampan::ops
