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
// DQ(a) + DQ(b) -> Q becomes com.microsoft::QLinearAdd (ops/ms_quantized.cpp); DQ -> MaxPool -> Q
// of one scale becomes MaxPool on the integers.
// Float8 (e4m3fn/e5m2) activations and per-tensor float8 weights into MatMul/Gemm make the same
// QMatMul with float8 operands (PassContext::fp8_products: cuBLASLt FP8 on the cuda backend).
// For a target without integer kernels (PassContext::integer_products) only the FP8 products (where
// it has those) and the folding run.
// Afterwards every DequantizeLinear left with constant inputs is folded into a float constant
// (constant_folding leaves the weights' ones for this pass).
#include <cstring>

#include "ops/op.h"
#include "ops/run_node.h"
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

bool IsInt8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }
bool IsFloat8(DType t) { return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2; }

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
bool PerTensorConst(const ir::Value* v) { return v == nullptr || (v->is_constant() && v->data.numel() == 1); }

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

ir::Node* Producer(const ir::Value* v) { return v ? v->producer() : nullptr; }

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
    if (gemm && (p->attr_int("transA", 0) != 0 || p->attr_float("alpha", 1.f) != 1.f ||
                 p->attr_float("beta", 1.f) != 1.f))
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
    SP_ASSIGN_OR_RETURN(ir::Node * fused, ReplaceWithFused(g, old, "sampan", conv ? "QConv" : "QMatMul", name, in,
                                                           attrs, out));
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
    if (bias && (!bias->is_constant() || bias->data.dtype() != DType::kInt32 || bias->data.numel() != channels)) continue;
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
      SP_ASSIGN_OR_RETURN(in[6], AddConst(g, bias->name() + "_float",
                                          Tensor::FromVector(DType::kFloat32, fb, {channels})));
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
    std::vector<ir::Value*> in{da->input(0), da->input(1), zp(da), db->input(0), db->input(1), zp(db),
                               q->input(1), q->input(2)};
    const std::string name = add->name, label = add->Label();
    SP_ASSIGN_OR_RETURN(ir::Node * fused, ReplaceWithFused(g, {add, q}, "com.microsoft", "QLinearAdd", name, in, {},
                                                           q->output(0)));
    (void)fused;
    ctx.Record(StrCat(label, " between DequantizeLinear and QuantizeLinear -> com.microsoft::QLinearAdd"));
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
  SP_ASSIGN_OR_RETURN(bool d, RewriteToFixpoint(g, ctx, FuseAdd));
  SP_ASSIGN_OR_RETURN(bool e, RewriteToFixpoint(g, ctx, FuseMaxPool));
  d = d || e;
  SP_ASSIGN_OR_RETURN(bool c, CleanUpDequantize(g, ctx));
  if (a || b || c || d) g.RemoveUnusedValues();
  return a || b || c || d;
}

}  // namespace

SAMPAN_REGISTER_PASS("fuse_quantized", FuseQuantized);

}  // namespace sampan::passes
