// RotaryEmbedding (opset 23): X [B, H, S, hd] or [B, S, H*hd] (num_heads needed),
// cos_cache/sin_cache [max_pos, rd/2] with position_ids [B, S], or [B, S, rd/2]
// without. Rotates the first rd (rotary_embedding_dim, default hd) elements of
// each head, as halves (x1 = x[:rd/2], x2 = x[rd/2:rd]) or interleaved pairs.
#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferRotaryEmbedding(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 4));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  if (ctx.has_input(3) && ctx.input_dtype(3) != DType::kInt64) return ctx.Error("position_ids must be int64");
  const ir::Node& n = ctx.node();
  const int64_t rd = n.attr_int("rotary_embedding_dim", 0);
  const int64_t nh = n.attr_int("num_heads", 0);
  if (rd < 0 || rd % 2) return ctx.Error("rotary_embedding_dim must be even and >= 0, got ", rd);
  if (nh < 0) return ctx.Error("num_heads must be >= 0");
  const auto& x = ctx.input_dims(0);
  if (x) {
    if (x->size() != 3 && x->size() != 4) return ctx.Error("input must be 3-D or 4-D");
    if (x->size() == 3) {
      if (nh == 0) return ctx.Error("num_heads is required for 3-D input");
      if ((*x)[2].known() && (*x)[2].value % nh) return ctx.Error("hidden size not divisible by num_heads");
    }
    const ir::Dim& last = (*x)[x->size() - 1];
    const int64_t hd = x->size() == 3 ? (last.known() ? last.value / nh : -1) : last.value;
    if (hd >= 0 && rd > hd) return ctx.Error("rotary_embedding_dim exceeds head size");
    if (hd >= 0 && rd == 0 && hd % 2) return ctx.Error("head size must be even");
  }
  ctx.set_output(0, ctx.input_dtype(0), x);
  return Status::Ok();
}

template <class T>
Status RunTyped(KernelContext& ctx) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& cosc = ctx.in(1);
  const Tensor& sinc = ctx.in(2);
  const Tensor* pos = ctx.has_input(3) ? ctx.inputs[3] : nullptr;
  const bool interleaved = n.attr_int("interleaved", 0) != 0;
  const bool three_d = x.rank() == 3;
  const int64_t B = x.dim(0);
  int64_t H, S, hd;
  if (three_d) {
    H = n.attr_int("num_heads", 0);
    S = x.dim(1);
    hd = x.dim(2) / H;
  } else {
    H = x.dim(1), S = x.dim(2), hd = x.dim(3);
  }
  int64_t rd = n.attr_int("rotary_embedding_dim", 0);
  if (rd == 0) rd = hd;
  const int64_t half = rd / 2;
  if (cosc.shape() != sinc.shape()) return ctx.Error("cos_cache and sin_cache shapes differ");
  if (cosc.rank() < 1 || cosc.dim(cosc.rank() - 1) != half) return ctx.Error("cache last dim must be rotary_dim/2");
  int64_t max_pos = 0;
  if (pos) {
    if (cosc.rank() != 2) return ctx.Error("with position_ids the caches must be 2-D");
    if (pos->numel() != B * S) return ctx.Error("position_ids must be [batch, seq]");
    max_pos = cosc.dim(0);
  } else if (cosc.rank() != 3 || cosc.dim(0) != B || cosc.dim(1) != S) {
    return ctx.Error("without position_ids the caches must be [batch, seq, rotary_dim/2]");
  }
  const T* px = x.data<T>();
  const T* pc = cosc.data<T>();
  const T* ps = sinc.data<T>();
  T* py = ctx.out(0).template mutable_data<T>();
  auto ld = [](T v) { return static_cast<Acc>(ConvertElement<ComputeType<T>>(v)); };
  auto st = [](Acc v) { return ConvertElement<T>(static_cast<ComputeType<T>>(v)); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      int64_t crow = b * S + s;
      if (pos) {
        crow = pos->data<int64_t>()[b * S + s];
        if (crow < 0 || crow >= max_pos) return ctx.Error("position id ", crow, " out of range");
      }
      const T* c = pc + crow * half;
      const T* sn = ps + crow * half;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = three_d ? (b * S + s) * H * hd + h * hd : ((b * H + h) * S + s) * hd;
        const T* xi = px + off;
        T* yo = py + off;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = interleaved ? 2 * i : i;
          const int64_t i2 = interleaved ? 2 * i + 1 : i + half;
          const Acc x1 = ld(xi[i1]), x2 = ld(xi[i2]), cv = ld(c[i]), sv = ld(sn[i]);
          yo[i1] = st(cv * x1 - sv * x2);
          yo[i2] = st(sv * x1 + cv * x2);
        }
        for (int64_t i = rd; i < hd; ++i) yo[i] = xi[i];
      }
    }
  return Status::Ok();
}

Status RunRotaryEmbedding(KernelContext& ctx) {
  Status st = Status::Ok();
  SP_RETURN_IF_ERROR(DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) st = RunTyped<T>(ctx);
  }));
  return st;
}

SAMPAN_REGISTER_OP("RotaryEmbedding", InferRotaryEmbedding, RunRotaryEmbedding);

}  // namespace
}  // namespace sampan::ops
