#include "backends/cuda/fuse_qkv.h"

#include <cstring>

#include "backends/cuda/lowering_pass.h"
#include "ops/attention.h"
#include "ops/run_node.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

struct Projection {
  ir::Node* reshape = nullptr;
  ir::Node* matmul = nullptr;
};

// Where a projection's weight and bias are: FusedMatMul(x, W, B) or, for FP8 products,
// QMatMul(x, x_scale, x_zp, W, w_scale, w_zp, B) (ops/quantized_fused.cpp).
bool IsQ(const ir::Node* mm) {
  return mm->op_type == "QMatMul";
}
size_t WeightIndex(const ir::Node* mm) {
  return IsQ(mm) ? 3 : 1;
}
size_t BiasIndex(const ir::Node* mm) {
  return IsQ(mm) ? 6 : 2;
}
const ir::Value* InputOrNull(const ir::Node* n, size_t i) {
  return i < n->num_inputs() ? n->input(i) : nullptr;
}

// The FusedMatMul (or float-output QMatMul) + Reshape feeding attention input `i`, when each is
// used only there.
bool MatchProjection(const ir::Graph& g, const ir::Node* attn, size_t i, Projection* p) {
  const ir::Value* in = attn->input(i);
  if (!in || !passes::HasSingleUse(g, in)) return false;
  ir::Node* rs = in->producer();
  if (!passes::Is(rs, "Reshape") || rs->attr_int("allowzero", 0) != 0 || !rs->input(1) || !rs->input(1)->is_constant())
    return false;
  const ir::Value* proj = rs->input(0);
  if (!passes::HasSingleUse(g, proj)) return false;
  ir::Node* mm = proj->producer();
  if (!mm || mm->domain != "sampan" || (mm->op_type != "FusedMatMul" && mm->op_type != "QMatMul")) return false;
  if (!mm->attr_string("activation", "").empty()) return false;
  // QMatMul: float output (no y_scale), no residual, per-tensor weight scale known here.
  if (IsQ(mm) &&
      (InputOrNull(mm, 7) || InputOrNull(mm, 8) || !mm->input(4)->is_constant() || mm->input(4)->data.numel() != 1))
    return false;
  const ir::Value* w = mm->input(WeightIndex(mm));
  if (!w || !w->is_constant() || w->data.rank() != 2) return false;
  const ir::Value* b = InputOrNull(mm, BiasIndex(mm));
  if (b && (!b->is_constant() || b->data.numel() != w->data.dim(1) || (!IsQ(mm) && b->data.dtype() != w->data.dtype())))
    return false;
  if (!proj->type.has_rank() || proj->type.dims->size() != 3) return false;
  p->reshape = rs;
  p->matmul = mm;
  return true;
}

// Three projections of one input with equal weight shapes and types and the same attributes;
// FP8 products also with the same activation quantization and equal weight scales (implicit FP8
// gives the products of one activation one weight scale), so the weights concatenate exactly.
bool Compatible(const Projection (&p)[3]) {
  const ir::Node* q = p[0].matmul;
  const size_t wi = WeightIndex(q), bi = BiasIndex(q);
  for (int i = 1; i < 3; ++i) {
    const ir::Node* m = p[i].matmul;
    if (m->op_type != q->op_type || m->input(0) != q->input(0) || m->attrs.size() != q->attrs.size()) return false;
    if (m->input(wi)->data.shape() != q->input(wi)->data.shape() ||
        m->input(wi)->data.dtype() != q->input(wi)->data.dtype())
      return false;
    if ((InputOrNull(m, bi) == nullptr) != (InputOrNull(q, bi) == nullptr)) return false;
    if (IsQ(q)) {
      if (m->input(1) != q->input(1) || InputOrNull(m, 2) != InputOrNull(q, 2)) return false;
      if (ElementAsDouble(m->input(4)->data, 0) != ElementAsDouble(q->input(4)->data, 0)) return false;
      const ir::Value* z0 = InputOrNull(q, 5);
      const ir::Value* zi = InputOrNull(m, 5);
      if ((z0 == nullptr) != (zi == nullptr) || (z0 && ElementAsDouble(z0->data, 0) != ElementAsDouble(zi->data, 0)))
        return false;
    }
    const Tensor& s0 = p[0].reshape->input(1)->data;
    const Tensor& si = p[i].reshape->input(1)->data;
    if (s0.shape() != si.shape() || s0.nbytes() != si.nbytes() || std::memcmp(s0.raw(), si.raw(), s0.nbytes()) != 0)
      return false;
  }
  return true;
}

// Column blocks side by side: [K, N] x 3 -> [K, 3N]; 1-D [N] x 3 -> [3N].
Tensor SideBySide(const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t rows = a.rank() == 2 ? a.dim(0) : 1;
  const size_t row_bytes = a.nbytes() / static_cast<size_t>(rows);
  Shape shape = a.shape();
  shape.back() *= 3;
  Tensor out = Tensor::Alloc(a.dtype(), shape);
  char* dst = static_cast<char*>(out.mutable_raw());
  for (int64_t r = 0; r < rows; ++r)
    for (const Tensor* t : {&a, &b, &c}) {
      std::memcpy(dst, static_cast<const char*>(t->raw()) + static_cast<size_t>(r) * row_bytes, row_bytes);
      dst += row_bytes;
    }
  return out;
}

}  // namespace

Result<std::vector<std::string>> FuseQkvProjections(plan::Plan& plan, int cc_major) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  if (cc_major < 8) return done;
  std::vector<ir::Node*> attentions;
  for (const auto& n : g.nodes())
    if (n->domain == "sampan" && n->op_type == "Attention" && ops::AttentionIsBshd(*n) &&
        n->attr_int("k_transposed", 0) == 0)
      attentions.push_back(n.get());
  for (ir::Node* attn : attentions) {
    Projection p[3];
    bool ok = true;
    for (size_t i = 0; i < 3 && ok; ++i) ok = MatchProjection(g, attn, i, &p[i]);
    if (!ok || !Compatible(p)) continue;
    // The fused kernel's conditions (attention.h): half types, head size <= 128.
    const ir::Value* q = attn->input(0);
    const DType dt = q->type.dtype;
    if ((dt != DType::kFloat16 && dt != DType::kBFloat16) || !q->type.has_rank() || q->type.dims->size() != 4) continue;
    const ir::Dim& heads = (*q->type.dims)[2];
    const ir::Dim& d = (*q->type.dims)[3];
    const Tensor& shape = p[0].reshape->input(1)->data;
    if (!heads.known() || !d.known() || d.value > 128 || shape.numel() != 4 || shape.dtype() != DType::kInt64) continue;
    const int64_t* s = shape.data<int64_t>();
    // [B, S, H, D], either of H and D possibly left to infer (-1: transformers writes
    // (*input_shape, -1, head_size)); the packed view spells both out.
    if ((s[2] != heads.value && s[2] != -1) || (s[3] != d.value && s[3] != -1)) continue;
    const ir::Node* mq = p[0].matmul;
    const size_t wi = WeightIndex(mq), bi = BiasIndex(mq);
    const int64_t n = mq->input(wi)->data.dim(1);
    if (n != heads.value * d.value) continue;

    // The merged projection and its [B, S, 3, H, D] view.
    const std::string base = mq->name;
    ir::Value* x = mq->input(0);
    SP_ASSIGN_OR_RETURN(ir::Value * w, g.AddConstant(g.FreshName(base + "_qkv_weight"),
                                                     SideBySide(mq->input(wi)->data, p[1].matmul->input(wi)->data,
                                                                p[2].matmul->input(wi)->data)));
    std::vector<ir::Value*> mm_inputs = {x, w};
    auto at = [&](size_t i) -> ir::Value* { return i < mq->num_inputs() ? mq->input(i) : nullptr; };
    if (IsQ(mq)) mm_inputs = {x, at(1), at(2), w, at(4), at(5)};
    if (InputOrNull(mq, bi)) {
      SP_ASSIGN_OR_RETURN(ir::Value * b, g.AddConstant(g.FreshName(base + "_qkv_bias"),
                                                       SideBySide(mq->input(bi)->data, p[1].matmul->input(bi)->data,
                                                                  p[2].matmul->input(bi)->data)));
      mm_inputs.push_back(b);
    }
    const std::string mm_op = mq->op_type;
    SP_ASSIGN_OR_RETURN(ir::Value * proj, g.AddValue(g.FreshName(base + "_qkv")));
    SP_ASSIGN_OR_RETURN(
        ir::Value * shape5,
        g.AddConstant(g.FreshName(base + "_qkv_shape"),
                      Tensor::FromVector<int64_t>(DType::kInt64, {s[0], s[1], 3, heads.value, d.value}, {5})));
    SP_ASSIGN_OR_RETURN(ir::Value * packed, g.AddValue(g.FreshName(base + "_qkv_packed")));
    const std::map<std::string, ir::Attribute> mm_attrs = mq->attrs;
    const std::string reshape_name = p[0].reshape->name;
    const plan::NodeChoice mm_choice = plan.choices.count(base) ? plan.choices.at(base) : plan::NodeChoice{};
    const plan::NodeChoice rs_choice =
        plan.choices.count(reshape_name) ? plan.choices.at(reshape_name) : plan::NodeChoice{};
    std::vector<std::string> old;
    for (const Projection& pr : p) {
      old.push_back(pr.matmul->name);
      old.push_back(pr.reshape->name);
    }
    attn->SetInput(0, packed);
    attn->SetInput(1, nullptr);
    attn->SetInput(2, nullptr);
    attn->attrs[ops::kAttentionLayoutAttr] = ir::Attribute::String(ops::kAttentionBs3hd);
    for (const Projection& pr : p) {
      g.RemoveNode(pr.reshape);
      g.RemoveNode(pr.matmul);
    }
    for (const std::string& name : old) plan.choices.erase(name);
    SP_ASSIGN_OR_RETURN(ir::Node * mm, g.AddNode(mm_op, mm_inputs, {proj}, base + "_qkv"));
    mm->domain = "sampan";
    mm->attrs = mm_attrs;
    SP_ASSIGN_OR_RETURN(ir::Node * rs, g.AddNode("Reshape", {proj, shape5}, {packed}, reshape_name + "_qkv"));
    plan::NodeChoice mm_c = mm_choice;
    mm_c.tactic = {};  // a new shape: timed by the builder after this rewrite
    plan.choices[mm->name] = mm_c;
    plan.choices[rs->name] = rs_choice;
    done.push_back(StrCat("cuda: Q/K/V projections '", old[0], "', '", old[2], "', '", old[4], "' -> ", mm->Label(),
                          " feeding ", attn->Label(), " packed"));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_qkv", (PlanRewritePassCc<FuseQkvProjections>));

}  // namespace sampan::cuda
