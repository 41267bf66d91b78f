// LinearAttention (opset 27): recurrent linear attention over a per-head state
// S of [d_k, d_v], token by token (decode T=1 and prefill T>1 alike).
//   query [B, T, Hq*d_k]   key [B, T, Hkv*d_k]   value [B, T, Hkv*d_v]
//   past_state [B, Hkv, d_k, d_v] (type S, optional; zeros when omitted)
//   decay [B, T, Hkv] or [B, T, Hkv*d_k]   log-space gate g_t (gated rules only)
//   beta  [B, T, Hkv] or [B, T, 1]         update rate (delta rules only)
// Per token t and KV head h:
//   gated rules:  S *= exp(g_t)                    (per head, or per row d of S)
//   delta rules:  v_t = beta_t * (v_t - S^T k_t)
//   always:       S += k_t (x) v_t;  o_t = scale * q_t^T S   (query head i reads KV head i / (Hq/Hkv))
// outputs: output [B, T, Hq*d_v] (T), present_state [B, Hkv, d_k, d_v] (past_state's
// type, or T when it is omitted). Computed in float32 as ONNX's reference does.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {
namespace {

enum Input : size_t { kQuery, kKey, kValue, kPast, kDecay, kBeta };

struct Rule {
  bool gated = false;
  bool delta = false;
};

Result<Rule> ReadRule(const ir::Node& node) {
  const std::string r = node.attr_string("update_rule", "gated_delta");
  if (r == "linear") return Rule{false, false};
  if (r == "gated") return Rule{true, false};
  if (r == "delta") return Rule{false, true};
  if (r == "gated_delta") return Rule{true, true};
  return InvalidArgument(node.Label(), ": attribute update_rule must be \"linear\", \"gated\", \"delta\" or ",
                         "\"gated_delta\", got \"", r, "\"");
}

// d = packed / heads when packed is known; error when it does not divide.
Result<ir::Dim> PerHead(const InferContext& ctx, const ir::Dim& packed, int64_t heads, const char* what) {
  if (!packed.known()) return ir::Dim::Unknown();
  if (packed.value % heads != 0)
    return ctx.Error(what, " last dim ", packed.value, " is not divisible by its head count ", heads);
  return ir::Dim::Known(packed.value / heads);
}

Status InferLinearAttention(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 6));
  if (ctx.opset() < 27)
    return ctx.Error("LinearAttention is defined from opset 27 (the model imports opset ", ctx.opset(), ")");
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2)
    return ctx.Error("expects 1 or 2 outputs (output, present_state), got ", ctx.num_outputs());
  const std::initializer_list<DType> kTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  SP_RETURN_IF_ERROR(ExpectDType(ctx, kQuery, kTypes));
  for (size_t i : {kKey, kValue, kDecay, kBeta})
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, kQuery, i));
  if (ctx.has_input(kPast)) SP_RETURN_IF_ERROR(ExpectDType(ctx, kPast, kTypes));

  SP_ASSIGN_OR_RETURN(const int64_t hq, ctx.node().required_int("q_num_heads"));
  SP_ASSIGN_OR_RETURN(const int64_t hkv, ctx.node().required_int("kv_num_heads"));
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    return ctx.Error("q_num_heads (", hq, ") must be a positive multiple of kv_num_heads (", hkv, ")");
  SP_ASSIGN_OR_RETURN(const Rule rule, ReadRule(ctx.node()));
  if (rule.gated != ctx.has_input(kDecay))
    return ctx.Error("update_rule \"", ctx.node().attr_string("update_rule", "gated_delta"),
                     rule.gated ? "\" needs the decay input" : "\" takes no decay input");
  if (rule.delta != ctx.has_input(kBeta))
    return ctx.Error("update_rule \"", ctx.node().attr_string("update_rule", "gated_delta"),
                     rule.delta ? "\" needs the beta input" : "\" takes no beta input");

  const char* names[] = {"query", "key", "value", "past_state", "decay", "beta"};
  for (size_t i = 0; i < 6; ++i) {
    const int64_t want = i == kPast ? 4 : 3;
    if (ctx.has_input(i) && ctx.input_rank(i) >= 0 && ctx.input_rank(i) != want)
      return ctx.Error(names[i], " must be rank ", want, ", got rank ", ctx.input_rank(i));
  }
  ir::Dim b = InputDim(ctx, kQuery, 0), t = InputDim(ctx, kQuery, 1);
  for (size_t i : {kKey, kValue, kDecay, kBeta}) {
    if (!ctx.has_input(i)) continue;
    SP_RETURN_IF_ERROR(UnifyDim(ctx, b, InputDim(ctx, i, 0), "batch size (dim 0 of query, key, value, decay, beta)"));
    SP_RETURN_IF_ERROR(
        UnifyDim(ctx, t, InputDim(ctx, i, 1), "sequence length (dim 1 of query, key, value, decay, beta)"));
  }
  SP_ASSIGN_OR_RETURN(ir::Dim dk, PerHead(ctx, InputDim(ctx, kQuery, 2), hq, "query"));
  SP_ASSIGN_OR_RETURN(ir::Dim dk_key, PerHead(ctx, InputDim(ctx, kKey, 2), hkv, "key"));
  SP_RETURN_IF_ERROR(UnifyDim(ctx, dk, dk_key, "head size d_k (query and key)"));
  SP_ASSIGN_OR_RETURN(ir::Dim dv, PerHead(ctx, InputDim(ctx, kValue, 2), hkv, "value"));
  if (ctx.has_input(kPast)) {
    SP_RETURN_IF_ERROR(UnifyDim(ctx, b, InputDim(ctx, kPast, 0), "batch size (query dim 0, past_state dim 0)"));
    const ir::Dim ph = InputDim(ctx, kPast, 1);
    if (ph.known() && ph.value != hkv)
      return ctx.Error("past_state dim 1 is ", ph.value, ", expected kv_num_heads = ", hkv);
    SP_RETURN_IF_ERROR(UnifyDim(ctx, dk, InputDim(ctx, kPast, 2), "head size d_k (query, past_state dim 2)"));
    SP_RETURN_IF_ERROR(UnifyDim(ctx, dv, InputDim(ctx, kPast, 3), "head size d_v (value, past_state dim 3)"));
  }
  if (ctx.has_input(kDecay)) {
    const ir::Dim g = InputDim(ctx, kDecay, 2);
    if (g.known() && g.value != hkv && !(dk.known() && g.value == hkv * dk.value))
      return ctx.Error("decay last dim ", g.value, " must be kv_num_heads (", hkv, ") or kv_num_heads*d_k",
                       dk.known() ? StrCat(" (", hkv * dk.value, ")") : std::string());
  }
  if (ctx.has_input(kBeta)) {
    const ir::Dim g = InputDim(ctx, kBeta, 2);
    if (g.known() && g.value != hkv && g.value != 1)
      return ctx.Error("beta last dim ", g.value, " must be kv_num_heads (", hkv, ") or 1");
  }
  const ir::Dim out_last = dv.known() ? ir::Dim::Known(hq * dv.value) : ir::Dim::Unknown();
  ctx.set_output(0, ctx.input_dtype(kQuery), ir::Dims{b, t, out_last});
  if (ctx.num_outputs() > 1) {
    const DType st = ctx.has_input(kPast) ? ctx.input_dtype(kPast) : ctx.input_dtype(kQuery);
    ctx.set_output(1, st, ir::Dims{b, ir::Dim::Known(hkv), dk, dv});
  }
  return Status::Ok();
}

// Any float tensor as float32 values, in its own layout.
std::vector<float> ToFloats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  (void)DispatchDType(t.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_same_v<T, float>)
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t.data<T>()[i]);
  });
  return v;
}

void StoreFloats(const std::vector<float>& v, Tensor& t) {
  (void)DispatchDType(t.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_same_v<T, float>)
      for (size_t i = 0; i < v.size(); ++i) t.mutable_data<T>()[i] = ConvertElement<T>(v[i]);
  });
}

Status RunLinearAttention(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(const Rule rule, ReadRule(ctx.node));
  const int64_t hq = ctx.node.attr_int("q_num_heads", 1), hkv = ctx.node.attr_int("kv_num_heads", 1);
  const Tensor& query = ctx.in(kQuery);
  const int64_t B = query.dim(0), T = query.dim(1), dk = query.dim(2) / hq, dv = ctx.in(kValue).dim(2) / hkv;
  const int64_t group = hq / hkv;
  const std::vector<float> q = ToFloats(query), k = ToFloats(ctx.in(kKey)), v = ToFloats(ctx.in(kValue));
  std::vector<float> g, beta;
  int64_t g_last = 0, beta_last = 0;
  if (rule.gated) {
    g = ToFloats(ctx.in(kDecay));
    g_last = ctx.in(kDecay).dim(2);
    for (float& x : g) x = std::exp(x);
  }
  if (rule.delta) {
    beta = ToFloats(ctx.in(kBeta));
    beta_last = ctx.in(kBeta).dim(2);
  }
  std::vector<float> state =
      ctx.has_input(kPast) ? ToFloats(ctx.in(kPast)) : std::vector<float>(static_cast<size_t>(B * hkv * dk * dv), 0.f);
  // Default scale 1/sqrt(d_k) is a double in the reference; the product is rounded to float.
  const float scale_attr = ctx.node.attr_float("scale", 0.f);
  const double scale = scale_attr == 0.f ? 1.0 / std::sqrt(static_cast<double>(dk)) : static_cast<double>(scale_attr);
  std::vector<float> out(static_cast<size_t>(B * T * hq * dv));
  std::vector<float> vt(static_cast<size_t>(dv));
  for (int64_t n = 0; n < B; ++n)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = n * T + t;
      for (int64_t h = 0; h < hkv; ++h) {
        float* s = state.data() + (n * hkv + h) * dk * dv;  // [dk, dv]
        const float* kt = k.data() + (tok * hkv + h) * dk;
        const float* vsrc = v.data() + (tok * hkv + h) * dv;
        if (rule.gated) {
          for (int64_t d = 0; d < dk; ++d) {
            const float e = g_last == hkv ? g[static_cast<size_t>(tok * hkv + h)]
                                          : g[static_cast<size_t>((tok * hkv + h) * dk + d)];
            for (int64_t m = 0; m < dv; ++m) s[d * dv + m] *= e;
          }
        }
        if (rule.delta) {
          const float bt = beta[static_cast<size_t>(tok * beta_last + (beta_last == 1 ? 0 : h))];
          for (int64_t m = 0; m < dv; ++m) {
            float retrieved = 0;
            for (int64_t d = 0; d < dk; ++d) retrieved += s[d * dv + m] * kt[d];
            vt[static_cast<size_t>(m)] = bt * (vsrc[m] - retrieved);
          }
        } else {
          std::copy_n(vsrc, dv, vt.begin());
        }
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t m = 0; m < dv; ++m) s[d * dv + m] += kt[d] * vt[static_cast<size_t>(m)];
        for (int64_t i = h * group; i < (h + 1) * group; ++i) {
          const float* qt = q.data() + (tok * hq + i) * dk;
          float* o = out.data() + (tok * hq + i) * dv;
          for (int64_t m = 0; m < dv; ++m) {
            float acc = 0;
            for (int64_t d = 0; d < dk; ++d) acc += qt[d] * s[d * dv + m];
            o[m] = static_cast<float>(scale * static_cast<double>(acc));
          }
        }
      }
    }
  StoreFloats(out, ctx.out(0));
  if (ctx.outputs.size() > 1) StoreFloats(state, ctx.out(1));
  return Status::Ok();
}

SAMPAN_REGISTER_OP("LinearAttention", InferLinearAttention, RunLinearAttention);

}  // namespace
}  // namespace sampan::ops
