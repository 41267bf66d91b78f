// sampan::Attention(Q, K, V, mask?, YScale?) — scaled dot-product attention as one op,
// produced by the fuse_attention pass:
//   out = Softmax(Q · K^T * scale + mask, axis=-1) · V
// With YScale (one value; the CUDA backend's fuse_quantized_outputs pass adds it) the
// output is QuantizeLinear(out, YScale) {output_dtype, saturate, precision} (sampan::
// QuantizeLinear's meaning), out rounded to Q's type first: the float8 activation an FP8
// product reads, bit for bit what the two ops give.
// Q [..., Sq, D], K [..., Sk, D] (or [..., D, Sk] when k_transposed=1),
// V [..., Sk, Dv], mask additive, broadcastable to [..., Sq, Sk]; out [..., Sq, Dv].
// Leading dims of Q, K and V must be equal. With layout="bshd" (ops/attention.h,
// set by fold_attention_transposes) the tensors are [B, S, H, D] in memory and the
// same formula applies to their [B, H, S, D] views; with layout="bs3hd" one input holds
// all three as [B, S, 3, H, D]. Accumulates in float (double
// for f64). Rows whose softmax is undefined (all -inf, or a NaN) give zeros.
#include "ops/attention.h"

#include <cmath>
#include <limits>
#include <utility>

#include "ops/common.h"

namespace sampan::ops {
namespace {

// The [B, H, S, D] view of a bshd dim list (the permutation is its own inverse).
template <class V>
V SwapSH(V d) {
  std::swap(d[1], d[2]);
  return d;
}

// Packed [B, S, 3, H, D]: Q, K, V and the output all have the bshd shape [B, S, H, D].
Status InferPackedAttention(InferContext& ctx) {
  if (ctx.has_input(1) || ctx.has_input(2))
    return ctx.Error("layout \"bs3hd\" takes Q, K and V packed in input 0 (inputs 1 and 2 must be absent)");
  if (ctx.node().attr_int("k_transposed", 0) != 0) return ctx.Error("layout \"bs3hd\" needs k_transposed = 0");
  const auto& p = ctx.input_dims(0);
  if (!p) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  if (p->size() != 5) return ctx.Error("layout \"bs3hd\" needs a rank-5 [B, S, 3, H, D] input, got rank ", p->size());
  if ((*p)[2].known() && (*p)[2].value != 3) return ctx.Error("layout \"bs3hd\": dimension 2 must be 3 (Q, K, V)");
  ctx.set_output(0, ctx.input_dtype(0), ir::Dims{(*p)[0], (*p)[1], (*p)[3], (*p)[4]});
  return Status::Ok();
}

constexpr size_t kYScale = 4;

const OpDef* QuantizeOp() {
  return FindOp("sampan", "QuantizeLinear");
}

// Output 0 as the unquantized attention (Q's type).
Status InferFloatAttention(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  for (size_t i = 1; i < std::min(ctx.num_inputs(), kYScale); ++i)
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  const bool kt = ctx.node().attr_int("k_transposed", 0) != 0;
  const std::string layout = ctx.node().attr_string(kAttentionLayoutAttr, kAttentionBhsd);
  if (layout == kAttentionBs3hd) return InferPackedAttention(ctx);
  if (layout != kAttentionBhsd && layout != kAttentionBshd)
    return ctx.Error("layout must be \"bhsd\", \"bshd\" or \"bs3hd\", got \"", layout, "\"");
  if (!ctx.has_input(1) || !ctx.has_input(2)) return ctx.Error("Q, K and V are inputs 0, 1 and 2");
  const bool bshd = layout == kAttentionBshd;
  if (bshd && kt) return ctx.Error("layout \"bshd\" takes K as [B, Sk, H, D] (k_transposed must be 0)");
  const auto& q0 = ctx.input_dims(0);
  const auto& k0 = ctx.input_dims(1);
  const auto& v0 = ctx.input_dims(2);
  if (!q0 || !k0 || !v0) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  const size_t r = q0->size();
  if (r < 2 || k0->size() != r || v0->size() != r) return ctx.Error("Q, K and V must have the same rank >= 2");
  if (bshd && r != 4) return ctx.Error("layout \"bshd\" needs rank-4 Q, K and V, got rank ", r);
  const ir::Dims q = bshd ? SwapSH(*q0) : *q0;
  const ir::Dims k = bshd ? SwapSH(*k0) : *k0;
  const ir::Dims v = bshd ? SwapSH(*v0) : *v0;
  auto mismatch = [](const ir::Dim& a, const ir::Dim& b) { return a.known() && b.known() && a.value != b.value; };
  for (size_t i = 0; i + 2 < r; ++i)
    if (mismatch(q[i], k[i]) || mismatch(q[i], v[i])) return ctx.Error("Q, K and V leading dims differ");
  const ir::Dim& kd = kt ? k[r - 2] : k[r - 1];
  const ir::Dim& ks = kt ? k[r - 1] : k[r - 2];
  if (mismatch(q[r - 1], kd)) return ctx.Error("Q and K head sizes differ");
  if (mismatch(ks, v[r - 2])) return ctx.Error("K and V sequence lengths differ");
  ir::Dims out = q;
  out[r - 1] = v[r - 1];
  ctx.set_output(0, ctx.input_dtype(0), bshd ? SwapSH(out) : out);
  return Status::Ok();
}

Status InferAttention(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 5));
  SP_RETURN_IF_ERROR(InferFloatAttention(ctx));
  if (!ctx.has_input(kYScale)) return Status::Ok();
  if (QuantizeOp() == nullptr) return ctx.NotSupported("QuantizeLinear is not available");
  const InferInput& ys = ctx.input(kYScale);
  bool one = ys.dims.has_value();
  for (size_t d = 0; one && d < ys.dims->size(); ++d) one = (*ys.dims)[d].known() && (*ys.dims)[d].value == 1;
  if (!one || ctx.node().attr_int("block_size", 0) != 0)
    return ctx.Error("the output scale (input 4) must be one value (a per-tensor quantized output)");
  InferContext q(ctx.node(), ctx.opset(), {InferInput{true, ctx.output(0).dtype, ctx.output(0).dims, nullptr}, ys});
  SP_RETURN_IF_ERROR(QuantizeOp()->infer(q));
  ctx.set_output(0, q.output(0).dtype, q.output(0).dims);
  return Status::Ok();
}

// A tensor seen in the logical [lead..., rows, cols] order: shape and element strides.
struct LogicalView {
  Shape shape, strides;
};
LogicalView ViewOf(const Tensor& t, bool bshd) {
  LogicalView v{t.shape(), StridesOf(t.shape())};
  if (bshd) {
    v.shape = SwapSH(v.shape);
    v.strides = SwapSH(v.strides);
  }
  return v;
}

// Element offset of flattened leading index `b` (row-major over the first rank-2 dims).
int64_t LeadOffset(int64_t b, const LogicalView& v) {
  int64_t off = 0;
  for (size_t i = v.shape.size() - 2; i-- > 0;) {
    off += (b % v.shape[i]) * v.strides[i];
    b /= v.shape[i];
  }
  return off;
}

// Q, K or V (part 0, 1, 2) of a packed [B, S, 3, H, D] tensor as a [B, H, S, D] view;
// its data starts part * H * D elements into the tensor.
LogicalView PackedPart(const Tensor& t) {
  const Shape& s = t.shape();
  const Shape st = StridesOf(s);
  return LogicalView{{s[0], s[3], s[1], s[4]}, {st[0], st[3], st[1], st[4]}};
}

template <class T>
void RunTyped(KernelContext& ctx) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool packed = AttentionIsPacked(ctx.node);
  const bool bshd = packed || AttentionIsBshd(ctx.node);
  const LogicalView q = packed ? PackedPart(ctx.in(0)) : ViewOf(ctx.in(0), bshd);
  const LogicalView k = packed ? q : ViewOf(ctx.in(1), bshd);
  const LogicalView v = packed ? q : ViewOf(ctx.in(2), bshd);
  const LogicalView y = ViewOf(ctx.out(0), bshd);
  const int64_t part = packed ? ctx.in(0).shape()[3] * ctx.in(0).shape()[4] : 0;  // H * D
  const Tensor* mask = ctx.has_input(3) ? ctx.inputs[3] : nullptr;
  const bool kt = ctx.node.attr_int("k_transposed", 0) != 0;
  const Acc scale = static_cast<Acc>(ctx.node.attr_float("scale", 1.f));
  const size_t r = q.shape.size();
  const int64_t sq = q.shape[r - 2], d = q.shape[r - 1];
  const int64_t sk = kt ? k.shape[r - 1] : k.shape[r - 2];
  const int64_t dv = v.shape[r - 1];
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) batch *= q.shape[i];
  // K element (key j, channel c) = kb[j * k_j + c * k_c].
  const int64_t k_j = kt ? k.strides[r - 1] : k.strides[r - 2];
  const int64_t k_c = kt ? k.strides[r - 2] : k.strides[r - 1];
  // Mask strides broadcast against the logical score shape [lead..., Sq, Sk].
  LogicalView m{Shape(q.shape.begin(), q.shape.end() - 2), Shape(r, 0)};
  m.shape.push_back(sq);
  m.shape.push_back(sk);
  if (mask) {
    const Shape& ms = mask->shape();
    int64_t stride = 1;
    for (size_t i = ms.size(); i-- > 0;) {
      m.strides[r - ms.size() + i] = ms[i] == 1 ? 0 : stride;
      stride *= ms[i];
    }
  }
  const T* pq = ctx.in(0).data<T>();
  const T* pk = packed ? pq + part : ctx.in(1).data<T>();
  const T* pv = packed ? pq + 2 * part : ctx.in(2).data<T>();
  T* po = ctx.out(0).mutable_data<T>();
  std::vector<Acc> row(static_cast<size_t>(sk));
  std::vector<Acc> acc(static_cast<size_t>(dv));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t mbase = mask ? LeadOffset(b, m) : 0;
    const T* qb = pq + LeadOffset(b, q);
    const T* kb = pk + LeadOffset(b, k);
    const T* vb = pv + LeadOffset(b, v);
    T* yb = po + LeadOffset(b, y);
    for (int64_t i = 0; i < sq; ++i) {
      const T* qr = qb + i * q.strides[r - 2];
      Acc mx = -std::numeric_limits<Acc>::infinity();
      for (int64_t j = 0; j < sk; ++j) {
        Acc s = 0;
        for (int64_t c = 0; c < d; ++c)
          s += static_cast<Acc>(qr[c * q.strides[r - 1]]) * static_cast<Acc>(kb[j * k_j + c * k_c]);
        s *= scale;
        if (mask) {
          const int64_t off = mbase + i * m.strides[r - 2] + j * m.strides[r - 1];
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
        const T* vr = vb + j * v.strides[r - 2];
        for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] += p * static_cast<Acc>(vr[c * v.strides[r - 1]]);
      }
      T* yr = yb + i * y.strides[r - 2];
      for (int64_t c = 0; c < dv; ++c) yr[c * y.strides[r - 1]] = ConvertElement<T>(acc[static_cast<size_t>(c)]);
    }
  }
}

Status RunFloatAttention(KernelContext& ctx) {
  return DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) RunTyped<T>(ctx);
  });
}

Status RunAttention(KernelContext& ctx) {
  if (!ctx.has_input(kYScale)) return RunFloatAttention(ctx);
  // The attention in Q's type, then QuantizeLinear of it.
  KernelContext att{ctx.node, ctx.opset, ctx.inputs, {Tensor::Alloc(ctx.in(0).dtype(), ctx.out(0).shape())}, nullptr};
  SP_RETURN_IF_ERROR(RunFloatAttention(att));
  KernelContext q{ctx.node, ctx.opset, {&att.outputs[0], ctx.inputs[kYScale]}, {ctx.out(0)}, nullptr};
  SP_RETURN_IF_ERROR(QuantizeOp()->run(q));
  ctx.out(0) = q.outputs[0];
  return Status::Ok();
}

SAMPAN_REGISTER_DOMAIN_OP("sampan", "Attention", InferAttention, RunAttention);

}  // namespace
}  // namespace sampan::ops
