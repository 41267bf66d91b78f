// onnxruntime's quantized contrib ops (domain com.microsoft), which its QOperator-format
// quantization writes next to QLinearConv/QLinearMatMul:
//   QLinearAdd(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?)
//       C = QuantizeLinear(DequantizeLinear(A) + DequantizeLinear(B))   (broadcasting; C has A's type)
//   QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp) {channels_last}
//       Y = QuantizeLinear(mean over the spatial axes of DequantizeLinear(X)), keeping them as 1
//   QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?) {alpha, transA, transB}
//       Y = alpha * DQ(A) x DQ(B) + C * a_scale * b_scale, quantized with y_scale/y_zp when given
//       (else float32); b's scale per tensor or per output column; C int32 ([N] or [M, N]).
// Each runs as the ONNX ops it is defined by (a private graph run with their reference kernels),
// as onnxruntime's own reference implementations of these ops do.
#include <cstring>
#include <memory>

#include "ops/common.h"
#include "ops/control_flow.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

constexpr int64_t kQdqOpset = 13;

struct Sub {
  ir::Graph g;
  std::vector<ir::Value*> in;  // the node's inputs (nullptr when absent)
  ir::Value* out = nullptr;
};

Result<std::unique_ptr<Sub>> NewSub(size_t inputs, const std::vector<bool>& present) {
  auto s = std::make_unique<Sub>();
  s->g.opsets[""] = kQdqOpset;
  s->in.assign(inputs, nullptr);
  for (size_t i = 0; i < inputs && i < present.size(); ++i)
    if (present[i]) {
      SP_ASSIGN_OR_RETURN(s->in[i], s->g.AddValue(StrCat("in", i)));
    }
  return s;
}

Result<ir::Value*> Op(Sub& s, const std::string& op, const std::vector<ir::Value*>& in,
                      std::map<std::string, ir::Attribute> attrs = {}) {
  SP_ASSIGN_OR_RETURN(ir::Value * v, s.g.AddValue(""));
  SP_ASSIGN_OR_RETURN(ir::Node * n, s.g.AddNode(op, in, {v}, op));
  n->attrs = std::move(attrs);
  return v;
}

// A zero of `dtype` (a zero point the node omitted: the result keeps the input's type).
Result<ir::Value*> Zero(Sub& s, DType dtype) {
  Tensor t = Tensor::Alloc(dtype, {});
  std::memset(t.mutable_raw(), 0, t.nbytes());
  return s.g.AddConstant(s.g.FreshName("zero"), t);
}

// The sub-graph of each op; `dtype(i)` gives input i's type.
Result<std::unique_ptr<Sub>> Expand(const ir::Node& node, const std::vector<bool>& present,
                                    const std::function<DType(size_t)>& dtype, int64_t rank) {
  const std::string& op = node.op_type;
  if (op == "QLinearAdd") {
    SP_ASSIGN_OR_RETURN(auto s, NewSub(8, present));
    for (size_t i : {0, 1, 3, 4, 6})
      if (!s->in[i]) return InvalidArgument(node.Label(), ": input ", i, " is required");
    ir::Value* az = s->in[2] ? s->in[2] : nullptr;
    ir::Value* bz = s->in[5] ? s->in[5] : nullptr;
    ir::Value* cz = s->in[7];
    if (cz == nullptr) {
      SP_ASSIGN_OR_RETURN(cz, Zero(*s, dtype(0)));
    }
    SP_ASSIGN_OR_RETURN(ir::Value * a, Op(*s, "DequantizeLinear", {s->in[0], s->in[1], az}));
    SP_ASSIGN_OR_RETURN(ir::Value * b, Op(*s, "DequantizeLinear", {s->in[3], s->in[4], bz}));
    SP_ASSIGN_OR_RETURN(ir::Value * sum, Op(*s, "Add", {a, b}));
    SP_ASSIGN_OR_RETURN(s->out, Op(*s, "QuantizeLinear", {sum, s->in[6], cz}));
    return s;
  }
  if (op == "QLinearGlobalAveragePool") {
    SP_ASSIGN_OR_RETURN(auto s, NewSub(5, present));
    for (size_t i : {0, 1, 3})
      if (!s->in[i]) return InvalidArgument(node.Label(), ": input ", i, " is required");
    ir::Value* yz = s->in[4];
    if (yz == nullptr) {
      SP_ASSIGN_OR_RETURN(yz, Zero(*s, dtype(0)));
    }
    SP_ASSIGN_OR_RETURN(ir::Value * x, Op(*s, "DequantizeLinear", {s->in[0], s->in[1], s->in[2]}));
    ir::Value* pooled = nullptr;
    if (node.attr_int("channels_last", 0) != 0) {
      // [N, spatial..., C]: the spatial axes are 1..rank-2.
      if (rank < 3) return InvalidArgument(node.Label(), ": X must have rank >= 3, got ", rank);
      std::vector<int64_t> axes;
      for (int64_t d = 1; d + 1 < rank; ++d) axes.push_back(d);
      SP_ASSIGN_OR_RETURN(pooled, Op(*s, "ReduceMean", {x},
                                     {{"axes", ir::Attribute::Ints(axes)}, {"keepdims", ir::Attribute::Int(1)}}));
    } else {
      SP_ASSIGN_OR_RETURN(pooled, Op(*s, "GlobalAveragePool", {x}));
    }
    SP_ASSIGN_OR_RETURN(s->out, Op(*s, "QuantizeLinear", {pooled, s->in[3], yz}));
    return s;
  }
  if (op == "QGemm") {
    SP_ASSIGN_OR_RETURN(auto s, NewSub(9, present));
    for (size_t i : {0, 1, 3, 4})
      if (!s->in[i]) return InvalidArgument(node.Label(), ": input ", i, " is required");
    if (s->in[8] && !s->in[7]) return InvalidArgument(node.Label(), ": y_zero_point without y_scale");
    const int64_t trans_b = node.attr_int("transB", 0);
    SP_ASSIGN_OR_RETURN(ir::Value * a, Op(*s, "DequantizeLinear", {s->in[0], s->in[1], s->in[2]}));
    // b's per-column scale runs along N: axis 1 of [K, N], axis 0 of a transposed [N, K].
    SP_ASSIGN_OR_RETURN(ir::Value * b, Op(*s, "DequantizeLinear", {s->in[3], s->in[4], s->in[5]},
                                          {{"axis", ir::Attribute::Int(trans_b ? 0 : 1)}}));
    std::vector<ir::Value*> gemm_in{a, b};
    if (s->in[6]) {
      // C (int32) is in units of a_scale * b_scale (per column when b's scale is).
      SP_ASSIGN_OR_RETURN(ir::Value * cs, Op(*s, "Mul", {s->in[1], s->in[4]}));
      SP_ASSIGN_OR_RETURN(ir::Value * c32, Op(*s, "Cast", {s->in[6]}, {{"to", ir::Attribute::Int(1)}}));
      SP_ASSIGN_OR_RETURN(ir::Value * c, Op(*s, "Mul", {c32, cs}));
      gemm_in.push_back(c);
    }
    std::map<std::string, ir::Attribute> attrs{{"transB", ir::Attribute::Int(trans_b)},
                                               {"transA", ir::Attribute::Int(node.attr_int("transA", 0))},
                                               {"alpha", ir::Attribute::Float(node.attr_float("alpha", 1.f))}};
    SP_ASSIGN_OR_RETURN(ir::Value * y, Op(*s, "Gemm", gemm_in, attrs));
    if (s->in[7]) {
      ir::Value* yz = s->in[8];
      if (yz == nullptr) {
        SP_ASSIGN_OR_RETURN(yz, Zero(*s, dtype(0)));
      }
      SP_ASSIGN_OR_RETURN(s->out, Op(*s, "QuantizeLinear", {y, s->in[7], yz}));
    } else {
      s->out = y;
    }
    return s;
  }
  return Unsupported(node.Label(), ": not a quantized contrib op");
}

// The private graph's nodes in order (they were added in dependency order).
Status RunSub(const Sub& s, const std::vector<const Tensor*>& inputs, Tensor* out) {
  std::map<const ir::Value*, Tensor> vals;
  for (size_t i = 0; i < s.in.size(); ++i)
    if (s.in[i] && i < inputs.size() && inputs[i]) vals[s.in[i]] = *inputs[i];
  for (const auto& n : s.g.nodes()) {
    std::vector<const Tensor*> in;
    for (const ir::Value* v : n->inputs()) {
      if (v == nullptr) {
        in.push_back(nullptr);
      } else if (v->is_constant()) {
        in.push_back(&v->data);
      } else {
        auto it = vals.find(v);
        if (it == vals.end()) return Internal(n->Label(), ": input not computed");
        in.push_back(&it->second);
      }
    }
    std::vector<Tensor> res;
    SP_RETURN_IF_ERROR(RunNode(*n, kQdqOpset, in, &res));
    vals[n->output(0)] = std::move(res[0]);
  }
  *out = vals[s.out];
  return Status::Ok();
}

// Inference: the same private graph, typed with the node's input types.
Status InferMs(InferContext& ctx) {
  std::vector<bool> present(ctx.num_inputs());
  for (size_t i = 0; i < ctx.num_inputs(); ++i) present[i] = ctx.has_input(i);
  const int64_t rank = ctx.has_input(0) && ctx.input_dims(0) ? static_cast<int64_t>(ctx.input_dims(0)->size()) : 4;
  SP_ASSIGN_OR_RETURN(auto s, Expand(
                                  ctx.node(), present, [&](size_t i) { return ctx.input_dtype(i); }, rank));
  std::map<const ir::Value*, InferInput> types;
  for (size_t i = 0; i < s->in.size(); ++i)
    if (s->in[i]) types[s->in[i]] = ctx.input(i);
  for (const auto& n : s->g.nodes()) {
    std::vector<InferInput> in;
    for (const ir::Value* v : n->inputs()) {
      if (v == nullptr) {
        in.push_back(InferInput{});
      } else if (v->is_constant()) {
        ir::Dims d;
        for (int64_t x : v->data.shape()) d.push_back(ir::Dim::Known(x));
        in.push_back(InferInput{true, v->data.dtype(), d, &v->data});
      } else {
        in.push_back(types[v]);
      }
    }
    InferContext inner(*n, kQdqOpset, in);
    const OpDef* def = FindOp(n->domain, n->op_type);
    if (def == nullptr) return Internal("no op ", n->op_type);
    Status st = def->infer(inner);
    if (!st.ok()) return ctx.Error(st.message());
    types[n->output(0)] = InferInput{true, inner.output(0).dtype, inner.output(0).dims, nullptr};
  }
  const InferInput& out = types[s->out];
  ctx.set_output(0, out.dtype, out.dims);
  return Status::Ok();
}

Status RunMs(KernelContext& ctx) {
  std::vector<bool> present(ctx.inputs.size());
  for (size_t i = 0; i < ctx.inputs.size(); ++i) present[i] = ctx.has_input(i);
  const int64_t rank = ctx.has_input(0) ? ctx.in(0).rank() : 0;
  SP_ASSIGN_OR_RETURN(auto s, Expand(
                                  ctx.node, present, [&](size_t i) { return ctx.in(i).dtype(); }, rank));
  Tensor result;
  SP_RETURN_IF_ERROR(RunSub(*s, ctx.inputs, &result));
  SetKernelOutput(ctx, 0, std::move(result));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_DOMAIN_OP("com.microsoft", "QLinearAdd", InferMs, RunMs);
SAMPAN_REGISTER_DOMAIN_OP("com.microsoft", "QLinearGlobalAveragePool", InferMs, RunMs);
SAMPAN_REGISTER_DOMAIN_OP("com.microsoft", "QGemm", InferMs, RunMs);

}  // namespace sampan::ops
