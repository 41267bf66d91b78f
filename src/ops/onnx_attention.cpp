// ONNX Attention (default domain, opsets 23-25): scaled dot-product attention
// with optional KV cache, grouped-query heads, mask, causal masking, sliding
// window (opset 25), softcap.
//   Q [B, Hq, Sq, D] or [B, Sq, Hq*D]; K [B, Hkv, Skv, D] or [B, Skv, Hkv*D];
//   V [B, Hkv, Skv, Dv] or [B, Skv, Hkv*Dv]; past_key/value [B, Hkv, P, D|Dv].
// Outputs Y (same layout as Q, last dim Dv per head), present_key/value
// [B, Hkv, P+Skv, D|Dv], qk_matmul_output [B, Hq, Sq, P+Skv].
// Follows the ONNX reference (onnx 1.23, the errata of 23/24 included):
//  - bias = attn_mask (bool: false -> -inf; float: added; a last dim shorter than
//    T is padded with -inf), plus -inf where is_causal, the window or
//    nonpad_kv_seqlen exclude a key. Causal and window bounds are bottom-right
//    aligned: query i sits at position i + offset, offset = P with a past cache,
//    nonpad_kv_seqlen[b] - Sq with an external one, else 0;
//  - scores = softcap(Q*sqrt(scale) . K*sqrt(scale)) + bias, softmax in
//    softmax_precision (default: T); a row whose bias is all -inf gives zeros;
//  - every elementwise step is rounded to its type as the reference's numpy
//    computes it (float16/bfloat16 round after each op; products accumulate in
//    float; a bfloat16 softmax sum accumulates in bfloat16), so reduced-precision
//    results match it to the last bit rather than to a tolerance.
#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/numpy_rounding.h"

namespace sampan::ops {
namespace {

ir::Dim DimDiv(const ir::Dim& a, int64_t k) {
  return a.known() && k > 0 && a.value % k == 0 ? ir::Dim::Known(a.value / k) : ir::Dim::Unknown();
}
ir::Dim DimAdd(const ir::Dim& a, const ir::Dim& b) {
  return a.known() && b.known() ? ir::Dim::Known(a.value + b.value) : ir::Dim::Unknown();
}

Status InferOnnxAttention(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 7));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  for (size_t i : {1, 2, 4, 5})
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, i));
  if (ctx.has_input(3) && ctx.input_dtype(3) != DType::kBool) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 3));
  if (ctx.has_input(6) && ctx.input_dtype(6) != DType::kInt64) return ctx.Error("nonpad_kv_seqlen must be int64");
  if (ctx.has_input(4) != ctx.has_input(5)) return ctx.Error("past_key and past_value must be given together");
  const ir::Node& n = ctx.node();
  const int64_t mode = n.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) return ctx.Error("qk_matmul_output_mode must be in [0, 3], got ", mode);
  if (n.attr_float("softcap", 0.f) < 0) return ctx.Error("softcap must be >= 0");
  if (ctx.has_input(6) && ctx.has_input(4))
    return ctx.Error("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  if (n.has_attr("softmax_precision")) {
    const int64_t sp = n.attr_int("softmax_precision", 0);
    if (sp != static_cast<int64_t>(DType::kFloat32) && sp != static_cast<int64_t>(DType::kFloat16) &&
        sp != static_cast<int64_t>(DType::kFloat64) && sp != static_cast<int64_t>(DType::kBFloat16))
      return ctx.Error("softmax_precision must be 1 (float), 10 (float16), 11 (double) or 16 (bfloat16), got ", sp);
  }
  if (ctx.opset() >= 25)
    for (const char* w : {"left_window_size", "right_window_size"})
      if (n.attr_int(w, -1) < -1) return ctx.Error(w, " must be -1 (unbounded) or >= 0, got ", n.attr_int(w, -1));
  const DType dt = ctx.input_dtype(0);
  const auto& q = ctx.input_dims(0);
  const auto& k = ctx.input_dims(1);
  const auto& v = ctx.input_dims(2);
  auto unknown_all = [&]() {
    ctx.set_output(0, dt, std::nullopt);
    for (size_t o = 1; o < ctx.num_outputs(); ++o) ctx.set_output(o, o == 3 ? dt : ctx.input_dtype(o), std::nullopt);
    return Status::Ok();
  };
  if (!q || !k || !v) return unknown_all();
  const size_t r = q->size();
  if ((r != 3 && r != 4) || k->size() != r || v->size() != r) return ctx.Error("Q, K and V must all be 3-D or all 4-D");
  ir::Dim B = (*q)[0], Hq, Sq, D, Hkv, Skv, Dv;
  if (r == 3) {
    if (!n.has_attr("q_num_heads") || !n.has_attr("kv_num_heads"))
      return ctx.Error("3-D inputs need q_num_heads and kv_num_heads");
    const int64_t hq = n.attr_int("q_num_heads", 0), hkv = n.attr_int("kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0) return ctx.Error("q_num_heads and kv_num_heads must be > 0");
    if ((*q)[2].known() && (*q)[2].value % hq) return ctx.Error("Q hidden size not divisible by q_num_heads");
    if ((*k)[2].known() && (*k)[2].value % hkv) return ctx.Error("K hidden size not divisible by kv_num_heads");
    if ((*v)[2].known() && (*v)[2].value % hkv) return ctx.Error("V hidden size not divisible by kv_num_heads");
    Hq = ir::Dim::Known(hq);
    Hkv = ir::Dim::Known(hkv);
    Sq = (*q)[1];
    Skv = (*k)[1];
    D = DimDiv((*q)[2], hq);
    Dv = DimDiv((*v)[2], hkv);
  } else {
    Hq = (*q)[1];
    Sq = (*q)[2];
    D = (*q)[3];
    Hkv = (*k)[1];
    Skv = (*k)[2];
    Dv = (*v)[3];
    if ((*k)[3].known() && D.known() && (*k)[3].value != D.value) return ctx.Error("Q and K head sizes differ");
  }
  if (Hq.known() && Hkv.known() && (Hkv.value == 0 || Hq.value % Hkv.value))
    return ctx.Error("q heads must be a multiple of kv heads");
  ir::Dim T = Skv;
  if (ctx.has_input(4)) {
    const auto& pk = ctx.input_dims(4);
    if (pk && pk->size() != 4) return ctx.Error("past_key must be 4-D");
    T = pk ? DimAdd((*pk)[2], Skv) : ir::Dim::Unknown();
  }
  if (r == 3) {
    ctx.set_output(
        0, dt, ir::Dims{B, Sq, Hq.known() && Dv.known() ? ir::Dim::Known(Hq.value * Dv.value) : ir::Dim::Unknown()});
  } else {
    ctx.set_output(0, dt, ir::Dims{B, Hq, Sq, Dv});
  }
  if (ctx.num_outputs() > 1) ctx.set_output(1, dt, ir::Dims{B, Hkv, T, D});
  if (ctx.num_outputs() > 2) ctx.set_output(2, dt, ir::Dims{B, Hkv, T, Dv});
  if (ctx.num_outputs() > 3) ctx.set_output(3, dt, ir::Dims{B, Hq, Sq, T});
  return Status::Ok();
}

template <class T>
Status RunTyped(KernelContext& ctx) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const DType tdt = DTypeOf<T>();
  auto round_t = [&](Acc x) { return RoundTo(tdt, x); };
  const ir::Node& n = ctx.node;
  const Tensor& q = ctx.in(0);
  const Tensor& k = ctx.in(1);
  const Tensor& v = ctx.in(2);
  const bool three_d = q.rank() == 3;
  const int64_t B = q.dim(0);
  int64_t Hq, Sq, D, Hkv, Skv, Dv;
  if (three_d) {
    Hq = n.attr_int("q_num_heads", 1);
    Hkv = n.attr_int("kv_num_heads", 1);
    Sq = q.dim(1);
    D = q.dim(2) / Hq;
    Skv = k.dim(1);
    Dv = v.dim(2) / Hkv;
  } else {
    Hq = q.dim(1), Sq = q.dim(2), D = q.dim(3);
    Hkv = k.dim(1), Skv = k.dim(2), Dv = v.dim(3);
  }
  if (k.dim(0) != B || v.dim(0) != B) return ctx.Error("batch sizes differ");
  if ((three_d ? k.dim(2) / Hkv : k.dim(3)) != D) return ctx.Error("Q and K head sizes differ");
  if ((three_d ? v.dim(1) : v.dim(2)) != Skv) return ctx.Error("K and V sequence lengths differ");
  if (!three_d && v.dim(1) != Hkv) return ctx.Error("K and V head counts differ");
  if (Hkv <= 0 || Hq % Hkv) return ctx.Error("q heads must be a multiple of kv heads");
  const Tensor* pk = ctx.has_input(4) ? ctx.inputs[4] : nullptr;
  const Tensor* pv = ctx.has_input(5) ? ctx.inputs[5] : nullptr;
  const int64_t P = pk ? pk->dim(2) : 0;
  if (pk && (pk->rank() != 4 || pk->dim(0) != B || pk->dim(1) != Hkv || pk->dim(3) != D))
    return ctx.Error("past_key shape mismatch");
  if (pv && (pv->rank() != 4 || pv->dim(0) != B || pv->dim(1) != Hkv || pv->dim(2) != P || pv->dim(3) != Dv))
    return ctx.Error("past_value shape mismatch");
  const int64_t Tn = P + Skv;
  const int64_t group = Hq / Hkv;

  // present K/V in Acc, [B, Hkv, T, D|Dv].
  auto build_present = [&](const Tensor& x, const Tensor* past, int64_t d) {
    std::vector<Acc> out(static_cast<size_t>(B * Hkv * Tn * d));
    const T* px = x.data<T>();
    const T* pp = past ? past->data<T>() : nullptr;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h) {
        Acc* dst = out.data() + ((b * Hkv + h) * Tn) * d;
        for (int64_t t = 0; t < P; ++t)
          for (int64_t c = 0; c < d; ++c)
            dst[t * d + c] = static_cast<Acc>(ConvertElement<ComputeType<T>>(pp[((b * Hkv + h) * P + t) * d + c]));
        for (int64_t s = 0; s < Skv; ++s) {
          const int64_t off = three_d ? (b * Skv + s) * Hkv * d + h * d : ((b * Hkv + h) * Skv + s) * d;
          for (int64_t c = 0; c < d; ++c)
            dst[(P + s) * d + c] = static_cast<Acc>(ConvertElement<ComputeType<T>>(px[off + c]));
        }
      }
    return out;
  };
  std::vector<Acc> K = build_present(k, pk, D);
  const std::vector<Acc> V = build_present(v, pv, Dv);
  auto write_present = [&](size_t o, const std::vector<Acc>& src) {
    if (o >= ctx.outputs.size() || ctx.out(o).numel() != static_cast<int64_t>(src.size())) return;
    T* dst = ctx.out(o).template mutable_data<T>();
    for (size_t i = 0; i < src.size(); ++i) dst[i] = ConvertElement<T>(static_cast<ComputeType<T>>(src[i]));
  };
  write_present(1, K);
  write_present(2, V);

  // Mask broadcast strides against [B, Hq, Sq, T] (last dim: no broadcast, pad).
  const Tensor* mask = ctx.has_input(3) ? ctx.inputs[3] : nullptr;
  int64_t ms[4] = {0, 0, 0, 0};
  int64_t mlast = 0;
  if (mask) {
    const Shape& mshape = mask->shape();
    const int64_t mr = static_cast<int64_t>(mshape.size());
    if (mr < 1 || mr > 4) return ctx.Error("attn_mask rank must be 1..4");
    const int64_t target[4] = {B, Hq, Sq, Tn};
    mlast = mshape[mr - 1];
    if (mlast > Tn) return ctx.Error("attn_mask last dim exceeds total sequence length");
    int64_t stride = 1;
    for (int64_t i = mr - 1; i >= 0; --i) {
      const int64_t ax = 4 - mr + i;
      if (ax < 3 && mshape[i] != 1 && mshape[i] != target[ax]) return ctx.Error("attn_mask not broadcastable");
      ms[ax] = (ax < 3 && mshape[i] == 1) ? 0 : stride;
      stride *= mshape[i];
    }
  }
  const bool mask_bool = mask && mask->dtype() == DType::kBool;
  const Tensor* nonpad = ctx.has_input(6) ? ctx.inputs[6] : nullptr;
  if (nonpad && nonpad->numel() != B) return ctx.Error("nonpad_kv_seqlen must have batch_size elements");
  if (nonpad && pk) return ctx.Error("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  const bool causal = n.attr_int("is_causal", 0) != 0;
  const int64_t left = ctx.opset >= 25 ? n.attr_int("left_window_size", -1) : -1;
  const int64_t right = ctx.opset >= 25 ? n.attr_int("right_window_size", -1) : -1;
  const int64_t mode = n.attr_int("qk_matmul_output_mode", 0);
  const Acc softcap = round_t(static_cast<Acc>(n.attr_float("softcap", 0.f)));
  const DType sdt = n.has_attr("softmax_precision") ? static_cast<DType>(n.attr_int("softmax_precision", 1)) : tdt;
  auto round_s = [&](Acc x) { return RoundTo(sdt, x); };
  // The reference scales Q and K by sqrt(scale), rounded to T, before the product.
  const double scale =
      n.has_attr("scale") ? static_cast<double>(n.attr_float("scale", 1.f)) : 1.0 / std::sqrt(static_cast<double>(D));
  const Acc scale_root = round_t(static_cast<Acc>(std::sqrt(scale)));
  for (Acc& x : K) x = round_t(x * scale_root);
  const Acc ninf = -std::numeric_limits<Acc>::infinity();
  T* qk_out = nullptr;
  if (ctx.outputs.size() > 3 && ctx.out(3).numel() == B * Hq * Sq * Tn) qk_out = ctx.out(3).template mutable_data<T>();
  auto emit = [](T* dst, Acc x) { *dst = ConvertElement<T>(static_cast<ComputeType<T>>(x)); };

  const T* pq = q.data<T>();
  T* py = ctx.out(0).template mutable_data<T>();
  std::vector<Acc> qrow(static_cast<size_t>(D)), row(static_cast<size_t>(Tn)), acc(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid = nonpad ? nonpad->data<int64_t>()[b] : Tn;
    // Position of query 0 among the keys (bottom-right alignment).
    const int64_t offset = pk ? P : nonpad ? valid - Sq : 0;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      const Acc* Kb = K.data() + (b * Hkv + hk) * Tn * D;
      const Acc* Vb = V.data() + (b * Hkv + hk) * Tn * Dv;
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t qoff = three_d ? (b * Sq + i) * Hq * D + h * D : ((b * Hq + h) * Sq + i) * D;
        for (int64_t c = 0; c < D; ++c)
          qrow[c] = round_t(static_cast<Acc>(ConvertElement<ComputeType<T>>(pq[qoff + c])) * scale_root);
        T* qk_row = qk_out ? qk_out + ((b * Hq + h) * Sq + i) * Tn : nullptr;
        const int64_t mbase = b * ms[0] + h * ms[1] + i * ms[2];
        const int64_t pos = i + offset;
        bool all_masked = true;  // decided on the bias alone, as the reference does
        for (int64_t j = 0; j < Tn; ++j) {
          const Acc* kr = Kb + j * D;
          Acc s = 0;
          for (int64_t c = 0; c < D; ++c) s += qrow[c] * kr[c];
          s = round_t(s);
          if (softcap > 0) s = round_t(round_t(std::tanh(round_t(s / softcap))) * softcap);
          if (qk_row && mode < 2) emit(qk_row + j, s);
          Acc bias = 0;
          if (mask) {
            if (j >= mlast) {
              bias = ninf;
            } else if (mask_bool) {
              if (!mask->data<bool>()[mbase + j * ms[3]]) bias = ninf;
            } else {
              bias = static_cast<Acc>(ConvertElement<ComputeType<T>>(mask->data<T>()[mbase + j * ms[3]]));
            }
          }
          if (causal && j > pos) bias += ninf;
          if (left >= 0 && pos - j > left) bias += ninf;
          if (right >= 0 && j - pos > right) bias += ninf;
          if (j >= valid) bias += ninf;
          if (!(bias == ninf)) all_masked = false;
          s = round_t(s + bias);
          if (qk_row && mode == 2) emit(qk_row + j, s);
          row[j] = round_s(s);
        }
        // Softmax as the reference: max (NaN propagates), exp(x - max), sum, divide.
        Acc mx = ninf;
        for (int64_t j = 0; j < Tn && !std::isnan(mx); ++j) mx = std::isnan(row[j]) ? row[j] : std::max(mx, row[j]);
        if (mx == ninf) mx = 0;
        for (int64_t j = 0; j < Tn; ++j) row[j] = round_s(std::exp(round_s(row[j] - mx)));
        Acc sum = SumAs(sdt, row.data(), Tn);
        if (sum == 0) sum = 1;
        for (int64_t j = 0; j < Tn; ++j) row[j] = all_masked ? Acc(0) : round_t(round_s(row[j] / sum));
        if (qk_row && mode == 3)
          for (int64_t j = 0; j < Tn; ++j) emit(qk_row + j, row[j]);
        std::fill(acc.begin(), acc.end(), Acc(0));
        for (int64_t j = 0; j < Tn; ++j) {
          const Acc* vr = Vb + j * Dv;
          for (int64_t c = 0; c < Dv; ++c) acc[c] += row[j] * vr[c];
        }
        const int64_t yoff = three_d ? (b * Sq + i) * Hq * Dv + h * Dv : ((b * Hq + h) * Sq + i) * Dv;
        for (int64_t c = 0; c < Dv; ++c) emit(py + yoff + c, acc[c]);
      }
    }
  }
  return Status::Ok();
}

Status RunOnnxAttention(KernelContext& ctx) {
  Status st = Status::Ok();
  SP_RETURN_IF_ERROR(DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) st = RunTyped<T>(ctx);
  }));
  return st;
}

SAMPAN_REGISTER_OP("Attention", InferOnnxAttention, RunOnnxAttention);

}  // namespace
}  // namespace sampan::ops
