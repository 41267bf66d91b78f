// sampan::Attention(Q, K, V, mask?) — scaled dot-product attention as one op,
// produced by the fuse_attention pass:
//   out = Softmax(Q · K^T * scale + mask, axis=-1) · V
// Q [..., Sq, D], K [..., Sk, D] (or [..., D, Sk] when k_transposed=1),
// V [..., Sk, Dv], mask additive, broadcastable to [..., Sq, Sk]; out [..., Sq, Dv].
// Leading dims of Q, K and V must be equal. Accumulates in float (double for f64).
#include <cmath>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferAttention(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 4));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  const bool kt = ctx.node().attr_int("k_transposed", 0) != 0;
  const auto& q = ctx.input_dims(0);
  const auto& k = ctx.input_dims(1);
  const auto& v = ctx.input_dims(2);
  if (!q || !k || !v) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  const size_t r = q->size();
  if (r < 2 || k->size() != r || v->size() != r) return ctx.Error("Q, K and V must have the same rank >= 2");
  auto mismatch = [](const ir::Dim& a, const ir::Dim& b) { return a.known() && b.known() && a.value != b.value; };
  for (size_t i = 0; i + 2 < r; ++i)
    if (mismatch((*q)[i], (*k)[i]) || mismatch((*q)[i], (*v)[i])) return ctx.Error("Q, K and V leading dims differ");
  const ir::Dim& kd = kt ? (*k)[r - 2] : (*k)[r - 1];
  const ir::Dim& ks = kt ? (*k)[r - 1] : (*k)[r - 2];
  if (mismatch((*q)[r - 1], kd)) return ctx.Error("Q and K head sizes differ");
  if (mismatch(ks, (*v)[r - 2])) return ctx.Error("K and V sequence lengths differ");
  ir::Dims out = *q;
  out[r - 1] = (*v)[r - 1];
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

template <class T>
void RunTyped(KernelContext& ctx) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Tensor& q = ctx.in(0);
  const Tensor& k = ctx.in(1);
  const Tensor& v = ctx.in(2);
  const Tensor* mask = ctx.has_input(3) ? ctx.inputs[3] : nullptr;
  Tensor& out = ctx.out(0);
  const bool kt = ctx.node.attr_int("k_transposed", 0) != 0;
  const Acc scale = static_cast<Acc>(ctx.node.attr_float("scale", 1.f));
  const int64_t r = q.rank();
  const int64_t sq = q.dim(r - 2), d = q.dim(r - 1);
  const int64_t sk = kt ? k.dim(r - 1) : k.dim(r - 2);
  const int64_t dv = v.dim(r - 1);
  const int64_t batch = q.numel() / std::max<int64_t>(1, sq * d);
  // Mask strides broadcast against the score shape [lead..., Sq, Sk].
  Shape score_shape(q.shape().begin(), q.shape().end() - 2);
  score_shape.push_back(sq);
  score_shape.push_back(sk);
  Shape mstride(score_shape.size(), 0);
  if (mask) {
    const Shape& ms = mask->shape();
    int64_t stride = 1;
    for (size_t i = ms.size(); i-- > 0;) {
      mstride[score_shape.size() - ms.size() + i] = ms[i] == 1 ? 0 : stride;
      stride *= ms[i];
    }
  }
  const T* pq = q.data<T>();
  const T* pk = k.data<T>();
  const T* pv = v.data<T>();
  T* po = out.mutable_data<T>();
  std::vector<Acc> row(static_cast<size_t>(sk));
  std::vector<Acc> acc(static_cast<size_t>(dv));
  Shape lead(score_shape.begin(), score_shape.end() - 2);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t mbase = 0;  // mask offset of this batch element
    if (mask) {
      int64_t rem = b;
      for (size_t i = lead.size(); i-- > 0;) {
        mbase += (rem % lead[i]) * mstride[i];
        rem /= lead[i];
      }
    }
    const T* qb = pq + b * sq * d;
    const T* kb = pk + b * sk * d;
    const T* vb = pv + b * sk * dv;
    for (int64_t i = 0; i < sq; ++i) {
      Acc mx = -std::numeric_limits<Acc>::infinity();
      for (int64_t j = 0; j < sk; ++j) {
        Acc s = 0;
        for (int64_t c = 0; c < d; ++c) {
          const Acc kv = static_cast<Acc>(kt ? kb[c * sk + j] : kb[j * d + c]);
          s += static_cast<Acc>(qb[i * d + c]) * kv;
        }
        s *= scale;
        if (mask) {
          const int64_t off = mbase + i * mstride[mstride.size() - 2] + j * mstride.back();
          s += static_cast<Acc>(ConvertElement<ComputeType<T>>(mask->data<T>()[off]));
        }
        row[static_cast<size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      Acc sum = 0;
      for (int64_t j = 0; j < sk; ++j) {
        Acc e = std::isinf(mx) && mx < 0 ? Acc(0) : std::exp(row[static_cast<size_t>(j)] - mx);
        row[static_cast<size_t>(j)] = e;
        sum += e;
      }
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t j = 0; j < sk; ++j) {
        const Acc p = sum > 0 ? row[static_cast<size_t>(j)] / sum : Acc(0);
        const T* vr = vb + j * dv;
        for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] += p * static_cast<Acc>(vr[c]);
      }
      for (int64_t c = 0; c < dv; ++c) po[(b * sq + i) * dv + c] = ConvertElement<T>(acc[static_cast<size_t>(c)]);
    }
  }
}

Status RunAttention(KernelContext& ctx) {
  return DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) RunTyped<T>(ctx);
  });
}

SAMPAN_REGISTER_DOMAIN_OP("sampan", "Attention", InferAttention, RunAttention);

}  // namespace
}  // namespace sampan::ops
