// Q/DQ patterns -> integer and FP8 products (explicit quantization: the graph decides the precision).
//
//   DequantizeLinear(X int8/uint8, per tensor)       -> Conv | FusedConv | MatMul | FusedMatMul |
//   DequantizeLinear(W constant, per tensor or          Gemm | FusedGemm  [-> QuantizeLinear]
//                    per output channel)             ->
//   bias, residual (float32)                         ->
// becomes sampan::QConv / sampan::QMatMul (ops/quantized_fused.cpp), which computes the same
// graph; a QuantizeLinear that is the product's only reader is taken in too, so a chain of
// quantized layers passes int8/uint8 tensors from one integer kernel to the next. A Gemm is
// taken when it is a product plus a per-column bias (alpha = beta = 1, no transposed A); a
// transposed B is transposed once here. QLinearConv and QLinearMatMul (the operator form of
// quantized models) become the same nodes, their int32 bias turned into float32.
// Element-wise ops between quantized tensors, with the Q/DQ pairs between them, become one
// sampan::QPointwise (ops/quantized_pointwise.h), which keeps the intermediate roundings.
// DQ(a) + DQ(b) -> Q becomes com.microsoft::QLinearAdd (ops/ms_quantized.cpp); DQ -> MaxPool -> Q
// of one scale becomes MaxPool on the integers.
// Float8 (e4m3fn/e5m2) activations and per-tensor float8 weights into MatMul/Gemm make the same
// QMatMul with float8 operands (PassContext::fp8_products: cuBLASLt FP8 on the cuda backend).
// For a target without integer kernels (PassContext::integer_products) only the FP8 products (where
// it has those) and the folding run.
// Afterwards every DequantizeLinear left with constant inputs is folded into a float constant
// (constant_folding leaves the weights' ones for this pass).
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "ops/op.h"
#include "ops/quantized_pointwise.h"
#include "ops/run_node.h"
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

bool IsInt8(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8;
}
bool IsFloat8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2;
}

// The quantized types products may take: int8/uint8 for targets with integer kernels, float8 for
// targets with FP8 kernels (MatMul/Gemm only).
struct Allowed {
  bool ints = true;
  bool fp8 = false;
  bool Takes(DType t) const { return (ints && IsInt8(t)) || (fp8 && IsFloat8(t)); }
};
constexpr Allowed kInts{true, false};

// QuantizeLinear / DequantizeLinear of the ONNX domain, or Sampan's (the newest opset's semantics,
// written by implicit FP8 quantization).
bool IsQdq(const ir::Node* n, const char* op) {
  return n && n->op_type == op && (n->domain.empty() || n->domain == "sampan");
}

// A per-tensor scale/zero point: a constant with one element.
bool PerTensorConst(const ir::Value* v) {
  return v == nullptr || (v->is_constant() && v->data.numel() == 1);
}

// DequantizeLinear of an int8/uint8 (or, where allowed, float8) tensor to float32 with per-tensor
// constants.
bool IsActivationDq(const ir::Node* n, Allowed allowed = kInts) {
  if (!IsQdq(n, "DequantizeLinear") || n->num_inputs() < 2) return false;
  if (!allowed.Takes(n->input(0)->type.dtype) || n->output(0)->type.dtype != DType::kFloat32) return false;
  if (n->input(1)->type.dtype != DType::kFloat32) return false;
  if (n->attr_int("block_size", 0) != 0) return false;
  return PerTensorConst(n->input(1)) && PerTensorConst(n->num_inputs() > 2 ? n->input(2) : nullptr);
}

// The pieces of a quantized constant weight.
struct QWeight {
  ir::Value* q = nullptr;
  ir::Value* scale = nullptr;
  ir::Value* zero_point = nullptr;
};

// DequantizeLinear of a constant int8/uint8 W whose scale (and zero point) is per tensor or runs
// along `channel_axis` of W (the output channels).
// Float8 weights: per tensor only (cuBLASLt's FP8 products scale whole operands).
std::optional<QWeight> MatchWeightDq(const ir::Node* n, int64_t channel_axis, Allowed allowed = kInts) {
  if (!IsQdq(n, "DequantizeLinear") || n->num_inputs() < 2) return std::nullopt;
  ir::Value* q = n->input(0);
  ir::Value* s = n->input(1);
  ir::Value* zp = n->num_inputs() > 2 ? n->input(2) : nullptr;
  if (!q->is_constant() || !allowed.Takes(q->data.dtype()) || !s->is_constant() || s->data.dtype() != DType::kFloat32)
    return std::nullopt;
  if (IsFloat8(q->data.dtype()) && s->data.numel() != 1) return std::nullopt;
  if (zp && (!zp->is_constant() || zp->data.dtype() != q->data.dtype())) return std::nullopt;
  if (n->output(0)->type.dtype != DType::kFloat32 || n->attr_int("block_size", 0) != 0) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(q->data.shape().size());
  if (s->data.numel() != 1) {
    int64_t axis = n->attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis != channel_axis || s->data.shape().size() != 1 || s->data.numel() != q->data.shape()[axis])
      return std::nullopt;
  }
  if (zp && zp->data.numel() != s->data.numel()) return std::nullopt;
  return QWeight{q, s, zp};
}

ir::Node* Producer(const ir::Value* v) {
  return v ? v->producer() : nullptr;
}

bool FloatConstOrNull(const ir::Value* v) {
  return v == nullptr || (v->is_constant() && v->data.dtype() == DType::kFloat32);
}

// The QuantizeLinear that is y's only reader (per-tensor int8/uint8, or float8 where allowed), if any.
ir::Node* OutputQuantize(const ir::Graph& g, const ir::Value* y, Allowed allowed = kInts) {
  ir::Node* q = SoleUser(g, y);
  if (!IsQdq(q, "QuantizeLinear") || q->input(0) != y || q->num_inputs() < 3 || q->input(2) == nullptr) return nullptr;
  if (!allowed.Takes(q->output(0)->type.dtype) || q->input(1)->type.dtype != DType::kFloat32) return nullptr;
  if (q->has_attr("output_dtype") || q->attr_int("block_size", 0) != 0 || q->attr_int("saturate", 1) != 1)
    return nullptr;
  return PerTensorConst(q->input(1)) && PerTensorConst(q->input(2)) ? q : nullptr;
}

// The int8 2-D constant transposed (a Gemm's transB).
Result<Tensor> Transpose2D(const Tensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1];
  Tensor out = Tensor::Alloc(t.dtype(), {c, r});
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) dst[j * r + i] = src[i * c + j];
  return out;
}

Result<ir::Value*> AddConst(ir::Graph& g, const std::string& hint, Tensor t) {
  return g.AddConstant(g.FreshName(hint), std::move(t));
}

// Conv/MatMul/Gemm (plain or fused) fed by a quantized activation and a quantized constant weight:
// integer operands where the target has integer kernels, float8 operands (MatMul/Gemm) where it
// has FP8 kernels.
Result<bool> FuseProduct(ir::Graph& g, PassContext& ctx) {
  const Allowed allowed{ctx.integer_products, ctx.fp8_products};
  for (const auto& up : g.nodes()) {
    ir::Node* p = up.get();
    const bool sampan = p->domain == "sampan";
    if (!p->domain.empty() && !sampan) continue;
    const std::string op = p->op_type;
    const bool conv = op == (sampan ? "FusedConv" : "Conv");
    const bool matmul = op == (sampan ? "FusedMatMul" : "MatMul");
    const bool gemm = op == (sampan ? "FusedGemm" : "Gemm");
    if (!conv && !matmul && !gemm) continue;
    if (p->num_outputs() != 1 || p->num_inputs() < 2 || p->output(0)->type.dtype != DType::kFloat32) continue;
    ir::Node* dqx = Producer(p->input(0));
    if (!IsActivationDq(dqx, allowed)) continue;
    // One family per product: float8 with float8 (MatMul and Gemm only), integers with integers.
    const bool fp8 = IsFloat8(dqx->input(0)->type.dtype);
    if (fp8 && conv) continue;
    const Allowed family{!fp8, fp8};
    const bool trans_b = gemm && p->attr_int("transB", 0) != 0;
    if (gemm &&
        (p->attr_int("transA", 0) != 0 || p->attr_float("alpha", 1.f) != 1.f || p->attr_float("beta", 1.f) != 1.f))
      continue;
    const ir::Value* wv = p->input(1);
    if (!wv->type.dims) continue;
    const int64_t wrank = static_cast<int64_t>(wv->type.dims->size());
    if ((matmul || gemm) && wrank != 2) continue;
    if (gemm && (!p->input(0)->type.dims || p->input(0)->type.dims->size() != 2)) continue;
    const int64_t channel_axis = conv ? 0 : (trans_b ? 0 : 1);
    ir::Node* dqw = Producer(wv);
    std::optional<QWeight> w = MatchWeightDq(dqw, channel_axis, family);
    if (!w) continue;
    // Bias and residual.
    ir::Value* bias = nullptr;
    ir::Value* z = nullptr;
    const int64_t out_channels = w->q->data.shape()[channel_axis];
    if (conv) {
      bias = p->num_inputs() > 2 ? p->input(2) : nullptr;
      z = p->num_inputs() > 3 ? p->input(3) : nullptr;
    } else if (matmul) {
      bias = p->num_inputs() > 2 ? p->input(2) : nullptr;
      z = p->num_inputs() > 3 ? p->input(3) : nullptr;
    } else {
      bias = p->num_inputs() > 2 ? p->input(2) : nullptr;  // Gemm's C
      z = p->num_inputs() > 3 ? p->input(3) : nullptr;
      // C must be a per-column bias: [N] or [1, N].
      if (bias && (!bias->is_constant() || bias->data.numel() != out_channels ||
                   (bias->data.shape().size() == 2 && bias->data.shape()[0] != 1)))
        continue;
    }
    if (!FloatConstOrNull(bias) || (bias && bias->data.numel() != out_channels)) continue;
    if (z && z->type.dtype != DType::kFloat32) continue;
    ir::Value* y = p->output(0);
    ir::Node* q = z == nullptr ? OutputQuantize(g, y, family) : nullptr;

    // The new node's inputs.
    std::vector<ir::Value*> in(10, nullptr);
    in[0] = dqx->input(0);
    in[1] = dqx->input(1);
    in[2] = dqx->num_inputs() > 2 ? dqx->input(2) : nullptr;
    in[3] = w->q;
    in[4] = w->scale;
    in[5] = w->zero_point;
    if (trans_b) {
      SP_ASSIGN_OR_RETURN(Tensor t, Transpose2D(w->q->data));
      SP_ASSIGN_OR_RETURN(in[3], AddConst(g, w->q->name() + "_t", std::move(t)));
    }
    if (bias) {
      if (bias->data.shape().size() != 1) {
        SP_ASSIGN_OR_RETURN(in[6], AddConst(g, bias->name() + "_1d", bias->data.Reshaped({out_channels})));
      } else {
        in[6] = bias;
      }
    }
    in[7] = z;
    if (q) {
      in[8] = q->input(1);
      in[9] = q->input(2);
    }
    std::map<std::string, ir::Attribute> attrs;
    for (const auto& [key, attr] : p->attrs)
      if (!gemm || (key != "transA" && key != "transB" && key != "alpha" && key != "beta")) attrs[key] = attr;
    attrs["w_axis"] = ir::Attribute::Int(conv ? 0 : 1);
    while (!in.empty() && in.back() == nullptr) in.pop_back();
    ir::Value* out = q ? q->output(0) : y;
    std::vector<ir::Node*> old{p};
    if (q) old.push_back(q);
    const std::string name = p->name, label = p->Label();
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        ReplaceWithFused(g, old, "sampan", conv ? "QConv" : "QMatMul", name, in, attrs, out));
    ctx.Record(StrCat(label, " -> ", fused->op_type, " (", DTypeName(in[0]->type.dtype), " x ",
                      DTypeName(in[3]->type.dtype), q ? StrCat(" -> ", DTypeName(out->type.dtype)) : " -> float32",
                      ")"));
    return true;
  }
  return false;
}

// QLinearConv / QLinearMatMul with constant weights and scales.
Result<bool> FuseQLinear(ir::Graph& g, PassContext& ctx) {
  for (const auto& up : g.nodes()) {
    ir::Node* p = up.get();
    const bool conv = Is(p, "QLinearConv");
    if (!conv && !Is(p, "QLinearMatMul")) continue;
    if (p->num_inputs() < 8) continue;
    ir::Value* x = p->input(0);
    ir::Value* xs = p->input(1);
    ir::Value* xzp = p->input(2);
    ir::Value* w = p->input(3);
    ir::Value* ws = p->input(4);
    ir::Value* wzp = p->input(5);
    ir::Value* ys = p->input(6);
    ir::Value* yzp = p->input(7);
    if (!IsInt8(x->type.dtype) || !w->is_constant() || !IsInt8(w->data.dtype())) continue;
    if (!PerTensorConst(xs) || !PerTensorConst(xzp) || !PerTensorConst(ys) || !PerTensorConst(yzp)) continue;
    if (xs == nullptr || ys == nullptr || yzp == nullptr || xzp == nullptr) continue;
    if (!ws->is_constant() || (wzp && !wzp->is_constant())) continue;
    const Shape& wshape = w->data.shape();
    if (!conv && wshape.size() != 2) continue;
    const int64_t axis = conv ? 0 : 1;
    const int64_t channels = wshape.empty() ? 0 : wshape[axis];
    if (ws->data.numel() != 1 && ws->data.numel() != channels) continue;
    if (wzp && wzp->data.numel() != ws->data.numel()) continue;
    ir::Value* bias = conv && p->num_inputs() > 8 ? p->input(8) : nullptr;
    if (bias && (!bias->is_constant() || bias->data.dtype() != DType::kInt32 || bias->data.numel() != channels))
      continue;
    std::vector<ir::Value*> in{x, xs, xzp, w, ws, wzp, nullptr, nullptr, ys, yzp};
    // Per-channel scales become 1-D (a scalar-shaped [1] stays per tensor).
    if (ws->data.numel() == channels && ws->data.shape().size() != 1) {
      SP_ASSIGN_OR_RETURN(in[4], AddConst(g, ws->name() + "_1d", ws->data.Reshaped({channels})));
    }
    if (bias) {
      // B is in units of x_scale * w_scale[c].
      const float sx = *static_cast<const float*>(xs->data.raw());
      const float* sw = static_cast<const float*>(ws->data.raw());
      const int32_t* b = static_cast<const int32_t*>(bias->data.raw());
      std::vector<float> fb(static_cast<size_t>(channels));
      for (int64_t c = 0; c < channels; ++c)
        fb[static_cast<size_t>(c)] =
            static_cast<float>(static_cast<double>(b[c]) * static_cast<double>(sx * sw[ws->data.numel() == 1 ? 0 : c]));
      SP_ASSIGN_OR_RETURN(in[6],
                          AddConst(g, bias->name() + "_float", Tensor::FromVector(DType::kFloat32, fb, {channels})));
    }
    std::map<std::string, ir::Attribute> attrs = p->attrs;
    attrs["w_axis"] = ir::Attribute::Int(axis);
    const std::string name = p->name, label = p->Label();
    ir::Value* out = p->output(0);
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        ReplaceWithFused(g, {p}, "sampan", conv ? "QConv" : "QMatMul", name, in, attrs, out));
    ctx.Record(StrCat(label, " -> ", fused->op_type));
    return true;
  }
  return false;
}

// DQ(a) + DQ(b) -> Q (same shapes, per tensor) -> com.microsoft::QLinearAdd, onnxruntime's op
// with exactly that meaning: one integer pass instead of four float ones (residual Adds of a
// quantized ResNet).
Result<bool> FuseAdd(ir::Graph& g, PassContext& ctx) {
  for (const auto& up : g.nodes()) {
    ir::Node* add = up.get();
    if (!Is(add, "Add") || add->num_inputs() != 2 || add->output(0)->type.dtype != DType::kFloat32) continue;
    ir::Node* da = Producer(add->input(0));
    ir::Node* db = Producer(add->input(1));
    if (!IsActivationDq(da) || !IsActivationDq(db)) continue;
    if (!SameShape(add->input(0)->type, add->input(1)->type)) continue;
    ir::Node* q = OutputQuantize(g, add->output(0));
    if (q == nullptr || q->output(0)->type.dtype != da->input(0)->type.dtype ||
        da->input(0)->type.dtype != db->input(0)->type.dtype)
      continue;
    auto zp = [](ir::Node* n) { return n->num_inputs() > 2 ? n->input(2) : nullptr; };
    std::vector<ir::Value*> in{da->input(0), da->input(1), zp(da),      db->input(0),
                               db->input(1), zp(db),       q->input(1), q->input(2)};
    const std::string name = add->name, label = add->Label();
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        ReplaceWithFused(g, {add, q}, "com.microsoft", "QLinearAdd", name, in, {}, q->output(0)));
    (void)fused;
    ctx.Record(StrCat(label, " between DequantizeLinear and QuantizeLinear -> com.microsoft::QLinearAdd"));
    return true;
  }
  return false;
}

// ---- element-wise regions between quantized tensors -> sampan::QPointwise -------------------

// An element-wise float op QPointwise runs: float32 in and out, its operands (Clip's bounds and
// the attributes aside) one or two tensors; *params its parameters.
bool MatchPointwise(const ir::Node* n, ops::PwOp* op, float* p0, float* p1) {
  if (n == nullptr || !n->domain.empty() || n->num_outputs() != 1 || !n->subgraphs().empty()) return false;
  if (!ops::ParsePwOp(n->op_type, op)) return false;
  if (n->output(0)->type.dtype != DType::kFloat32) return false;
  const size_t operands = ops::PwBinary(*op) ? 2 : 1;
  if (*op == ops::PwOp::kClip) {
    // Bounds: opset >= 11 constant scalar inputs (absent = unbounded), before that attributes.
    if (n->num_inputs() < 1 || n->num_inputs() > 3) return false;
    *p0 = -std::numeric_limits<float>::max();
    *p1 = std::numeric_limits<float>::max();
    if (n->has_attr("min")) *p0 = n->attr_float("min", *p0);
    if (n->has_attr("max")) *p1 = n->attr_float("max", *p1);
    for (size_t i = 1; i < n->num_inputs(); ++i) {
      const ir::Value* b = n->input(i);
      if (b == nullptr) continue;
      if (!b->is_constant() || b->data.dtype() != DType::kFloat32 || b->data.numel() != 1) return false;
      (i == 1 ? *p0 : *p1) = *static_cast<const float*>(b->data.raw());
    }
  } else {
    if (n->num_inputs() != operands) return false;
    *p0 = *op == ops::PwOp::kHardSigmoid ? n->attr_float("alpha", 0.2f)
          : *op == ops::PwOp::kLeakyRelu ? n->attr_float("alpha", 0.01f)
                                         : 0.f;
    *p1 = *op == ops::PwOp::kHardSigmoid ? n->attr_float("beta", 0.5f) : 0.f;
  }
  for (size_t i = 0; i < operands; ++i)
    if (n->input(i) == nullptr || n->input(i)->type.dtype != DType::kFloat32) return false;
  return true;
}

bool IsPointwise(const ir::Node* n) {
  ops::PwOp op;
  float a, b;
  return MatchPointwise(n, &op, &a, &b);
}

float ScalarF32(const ir::Value* v) {
  return v ? static_cast<float>(ElementAsDouble(v->data, 0)) : 0.f;
}
int32_t ZeroPointOf(const ir::Node* qdq) {
  return qdq->num_inputs() > 2 && qdq->input(2) ? static_cast<int32_t>(ElementAsInt64(qdq->input(2)->data, 0)) : 0;
}

// A float constant QPointwise broadcasts cheaply against `out`: one value, or one per channel
// (every dim 1 but the output's axis 1, right-aligned, of the output's channel count).
bool ScalarOrPerChannel(const Tensor& c, const ir::TensorType& out) {
  if (c.dtype() != DType::kFloat32) return false;
  if (c.numel() == 1) return true;
  if (!out.dims || out.dims->size() < 2 || !(*out.dims)[1].known()) return false;
  const size_t r = out.dims->size(), cr = c.shape().size();
  if (cr > r || cr < r - 1) return false;
  for (size_t d = 0; d < cr; ++d) {
    const size_t od = r - cr + d;
    const int64_t want = od == 1 ? (*out.dims)[1].value : 1;
    if (c.shape()[d] != want) return false;
  }
  return true;
}

// From a QuantizeLinear that is the sole reader of an element-wise op's result, grows backwards the
// largest region of element-wise ops whose values are read only inside it, directly or through a
// QuantizeLinear whose every reader is a DequantizeLinear of the same scale (the graph's
// intermediate rounding, which the node keeps): the region becomes one sampan::QPointwise reading
// its quantized inputs as integers. PaddleOCR's hard-swish (x * relu6(x + 3) / 6 with its
// learnable affines) is 7 ops and 7 Q/DQ pairs: 21 steps become one. A lone Add of two quantized
// tensors is left to FuseAdd (QLinearAdd).
Result<bool> FusePointwise(ir::Graph& g, PassContext& ctx) {
  // Last nodes first: a region's root is the end of its chain, so it grows over the whole chain.
  for (size_t ri = g.nodes().size(); ri-- > 0;) {
    ir::Node* root = g.nodes()[ri].get();
    if (!IsPointwise(root)) continue;
    ir::Node* qout = OutputQuantize(g, root->output(0));
    if (qout == nullptr || !IsInt8(qout->output(0)->type.dtype)) continue;
    const ir::TensorType& out_type = qout->output(0)->type;
    std::set<ir::Node*> region{root};
    std::map<ir::Node*, ir::Node*> fq_of;  // region node -> the QuantizeLinear rounding its result
    std::set<ir::Node*> absorbed_dq;       // DequantizeLinear nodes of those, read inside only
    auto used_inside = [&](const ir::Value* v) {
      if (IsGraphOutput(g, v)) return false;
      for (const auto& [user, k] : v->uses())
        if (!region.count(user)) return false;
      return true;
    };
    // The QuantizeLinear -> DequantizeLinear(s) rounding a region candidate's result, when every
    // reader is such a DequantizeLinear read inside the region only.
    auto rounding = [&](ir::Node* dq) -> ir::Node* {
      if (!IsActivationDq(dq)) return nullptr;
      ir::Node* qn = Producer(dq->input(0));
      if (qn == nullptr || OutputQuantize(g, qn->input(0)) != qn) return nullptr;
      const ir::Value* q = qn->output(0);
      if (IsGraphOutput(g, q) || q->uses().empty()) return nullptr;
      const float s = ScalarF32(qn->input(1));
      for (const auto& [user, k] : q->uses()) {
        if (k != 0 || !IsActivationDq(user) || ScalarF32(user->input(1)) != s || ZeroPointOf(user) != ZeroPointOf(qn) ||
            !used_inside(user->output(0)))
          return nullptr;
      }
      return qn;
    };
    bool grew = true;
    while (grew) {
      grew = false;
      std::vector<ir::Node*> nodes(region.begin(), region.end());
      for (ir::Node* n : nodes) {
        ops::PwOp op;
        float a, b;
        MatchPointwise(n, &op, &a, &b);
        const size_t operands = ops::PwBinary(op) ? 2 : 1;
        for (size_t i = 0; i < operands; ++i) {
          ir::Node* p = Producer(n->input(i));
          if (p == nullptr || region.count(p) || absorbed_dq.count(p)) continue;
          if (IsPointwise(p) && used_inside(p->output(0))) {
            region.insert(p);
            grew = true;
            continue;
          }
          ir::Node* qn = rounding(p);
          if (qn == nullptr) continue;
          ir::Node* pw = Producer(qn->input(0));
          if (!IsPointwise(pw) || region.count(pw) || qn->input(0)->uses().size() != 1 ||
              IsGraphOutput(g, qn->input(0)))
            continue;
          region.insert(pw);
          fq_of[pw] = qn;
          for (const auto& [user, k] : qn->output(0)->uses()) absorbed_dq.insert(user);
          grew = true;
        }
      }
    }
    // The program: region nodes in graph order (the root last), operands as registers.
    std::vector<ir::Node*> order;
    for (const auto& n : g.nodes())
      if (region.count(n.get())) order.push_back(n.get());
    if (order.back() != root) continue;
    std::vector<ir::Value*> inputs;
    std::vector<float> in_scales;
    std::vector<int64_t> in_zps;
    std::map<std::pair<const ir::Value*, std::pair<float, int32_t>>, int> input_reg;
    std::map<const ir::Node*, int> node_reg;
    bool ok = true, any_const = false;
    auto operand = [&](ir::Value* v) -> int {
      ir::Node* p = Producer(v);
      if (p && region.count(p)) return node_reg.at(p);
      if (p && absorbed_dq.count(p)) return node_reg.at(Producer(Producer(p->input(0))->input(0)));
      ir::Value* src = v;
      float scale = 0;
      int32_t zp = 0;
      if (v->is_constant()) {
        if (!ScalarOrPerChannel(v->data, out_type)) ok = false;
        any_const = true;
      } else if (IsActivationDq(p)) {
        src = p->input(0);
        scale = ScalarF32(p->input(1));
        zp = ZeroPointOf(p);
        if (!(scale > 0)) ok = false;
      }
      if (!v->is_constant() && !SameShape(src->type, out_type)) ok = false;
      auto [it, inserted] =
          input_reg.emplace(std::make_pair(src, std::make_pair(scale, zp)), static_cast<int>(inputs.size()));
      if (inserted) {
        inputs.push_back(src);
        in_scales.push_back(scale);
        in_zps.push_back(zp);
      }
      return it->second;
    };
    // First walk: the inputs, in order of first use (region operands read placeholders).
    for (ir::Node* n : order) {
      ops::PwOp op;
      float a, b;
      MatchPointwise(n, &op, &a, &b);
      operand(n->input(0));
      if (ops::PwBinary(op)) operand(n->input(1));
      node_reg[n] = -1;  // numbered once the inputs are known
    }
    if (!ok) continue;
    if (order.size() == 1 && root->op_type == "Add" && !any_const && fq_of.empty() && in_scales[0] > 0 &&
        inputs.size() == 2 && in_scales[1] > 0)
      continue;  // FuseAdd's QLinearAdd
    // Registers: the inputs, then one per op; the second walk writes the operands.
    const int n_in = static_cast<int>(inputs.size());
    for (size_t j = 0; j < order.size(); ++j) node_reg[order[j]] = n_in + static_cast<int>(j);
    std::vector<std::string> op_names;
    std::vector<int64_t> lhs, rhs, fq_zps, fq_types;
    std::vector<float> params, fq_scales;
    for (ir::Node* n : order) {
      ops::PwOp op;
      float a, b;
      MatchPointwise(n, &op, &a, &b);
      op_names.push_back(n->op_type);
      lhs.push_back(operand(n->input(0)));
      rhs.push_back(ops::PwBinary(op) ? operand(n->input(1)) : -1);
      params.push_back(a);
      params.push_back(b);
      auto f = fq_of.find(n);
      if (f == fq_of.end()) {
        fq_scales.push_back(0.f);
        fq_zps.push_back(0);
        fq_types.push_back(0);
      } else {
        fq_scales.push_back(ScalarF32(f->second->input(1)));
        fq_zps.push_back(ZeroPointOf(f->second));
        fq_types.push_back(f->second->output(0)->type.dtype == DType::kUInt8 ? 2 : 3);
      }
    }
    if (!ok || static_cast<int>(inputs.size()) != n_in) continue;  // (operands resolve the same way twice)
    std::map<std::string, ir::Attribute> attrs;
    attrs["ops"] = ir::Attribute::Strings(op_names);
    attrs["lhs"] = ir::Attribute::Ints(lhs);
    attrs["rhs"] = ir::Attribute::Ints(rhs);
    attrs["params"] = ir::Attribute::Floats(params);
    attrs["fq_scales"] = ir::Attribute::Floats(fq_scales);
    attrs["fq_zero_points"] = ir::Attribute::Ints(fq_zps);
    attrs["fq_types"] = ir::Attribute::Ints(fq_types);
    attrs["in_scales"] = ir::Attribute::Floats(in_scales);
    attrs["in_zero_points"] = ir::Attribute::Ints(in_zps);
    attrs["y_scale"] = ir::Attribute::Float(ScalarF32(qout->input(1)));
    attrs["y_zero_point"] = ir::Attribute::Int(ZeroPointOf(qout));
    attrs["y_type"] = ir::Attribute::Int(qout->output(0)->type.dtype == DType::kUInt8 ? 2 : 3);
    std::vector<ir::Node*> remove(order.begin(), order.end());
    for (const auto& [n, qn] : fq_of) remove.push_back(qn);
    remove.insert(remove.end(), absorbed_dq.begin(), absorbed_dq.end());
    remove.push_back(qout);
    const std::string name = root->name, label = root->Label();
    const size_t nops = order.size(), nfq = fq_of.size();
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        ReplaceWithFused(g, remove, "sampan", "QPointwise", name, inputs, attrs, qout->output(0)));
    (void)fused;
    ctx.Record(StrCat(label, ": ", nops, " element-wise op(s) and ", nfq,
                      " intermediate Q/DQ rounding(s) between quantized tensors -> sampan::QPointwise"));
    return true;
  }
  return false;
}

// DQ(x) -> MaxPool -> Q with the same scale and zero point is MaxPool on x itself (max commutes
// with a positive scale, and Q undoes DQ exactly).
Result<bool> FuseMaxPool(ir::Graph& g, PassContext& ctx) {
  if (g.opset() < 12) return false;  // int8 MaxPool is opset 12
  for (const auto& up : g.nodes()) {
    ir::Node* pool = up.get();
    if (!(Is(pool, "MaxPool") || Is(pool, "GlobalMaxPool")) || pool->num_outputs() != 1) continue;
    ir::Node* dq = Producer(pool->input(0));
    if (!IsActivationDq(dq)) continue;
    ir::Node* q = OutputQuantize(g, pool->output(0));
    if (q == nullptr || q->output(0)->type.dtype != dq->input(0)->type.dtype) continue;
    const ir::Value* dz = dq->num_inputs() > 2 ? dq->input(2) : nullptr;
    const float s1 = *static_cast<const float*>(dq->input(1)->data.raw());
    const float s2 = *static_cast<const float*>(q->input(1)->data.raw());
    auto zp = [](const ir::Value* v) { return v ? static_cast<int>(ElementAsInt64(v->data, 0)) : 0; };
    if (!(s1 > 0) || s1 != s2 || zp(dz) != zp(q->input(2))) continue;
    const std::string name = pool->name, label = pool->Label();
    SP_ASSIGN_OR_RETURN(ir::Node * fused, ReplaceWithFused(g, {pool, q}, "", pool->op_type, name, {dq->input(0)},
                                                           pool->attrs, q->output(0)));
    (void)fused;
    ctx.Record(StrCat(label, " between DequantizeLinear and QuantizeLinear of the same scale -> on the integers"));
    return true;
  }
  return false;
}

// Removes DequantizeLinear nodes nothing reads any more, and folds the constant ones left.
Result<bool> CleanUpDequantize(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  std::vector<ir::Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* n : nodes) {
    if (!IsQdq(n, "DequantizeLinear")) continue;
    ir::Value* y = n->output(0);
    if (y->uses().empty() && !IsGraphOutput(g, y)) {
      g.RemoveNode(n);
      changed = true;
      continue;
    }
    bool constant = true;
    std::vector<const Tensor*> args;
    for (ir::Value* v : n->inputs()) {
      if (v && !v->is_constant()) constant = false;
      args.push_back(v ? &v->data : nullptr);
    }
    if (!constant) continue;
    std::vector<Tensor> values;
    SP_RETURN_IF_ERROR(ops::RunNode(*n, g.opset(), args, &values));
    ctx.Record(StrCat("folded ", n->Label(), " (weights no integer kernel takes) into a constant"));
    SP_RETURN_IF_ERROR(ReplaceWithConstants(g, n, values));
    changed = true;
  }
  return changed;
}

Result<bool> FuseQuantized(ir::Graph& g, PassContext& ctx) {
  if (!ctx.integer_products) {
    // The target has no integer kernels: FP8 products where it has those, the other weights back
    // to float constants, the rest as it is.
    bool fused = false;
    if (ctx.fp8_products) {
      SP_ASSIGN_OR_RETURN(fused, RewriteToFixpoint(g, ctx, FuseProduct));
    }
    SP_ASSIGN_OR_RETURN(bool folded, CleanUpDequantize(g, ctx));
    if (fused || folded) g.RemoveUnusedValues();
    return fused || folded;
  }
  SP_ASSIGN_OR_RETURN(bool a, RewriteToFixpoint(g, ctx, FuseQLinear));
  SP_ASSIGN_OR_RETURN(bool b, RewriteToFixpoint(g, ctx, FuseProduct));
  // The weights' DequantizeLinear nodes become float constants first: the element-wise regions
  // read them as such.
  SP_ASSIGN_OR_RETURN(bool f, CleanUpDequantize(g, ctx));
  SP_ASSIGN_OR_RETURN(bool p, RewriteToFixpoint(g, ctx, FusePointwise));
  SP_ASSIGN_OR_RETURN(bool d, RewriteToFixpoint(g, ctx, FuseAdd));
  d = d || f || p;
  SP_ASSIGN_OR_RETURN(bool e, RewriteToFixpoint(g, ctx, FuseMaxPool));
  d = d || e;
  SP_ASSIGN_OR_RETURN(bool c, CleanUpDequantize(g, ctx));
  if (a || b || c || d) g.RemoveUnusedValues();
  return a || b || c || d;
}

}  // namespace

SAMPAN_REGISTER_PASS("fuse_quantized", FuseQuantized);

}  // namespace sampan::passes
