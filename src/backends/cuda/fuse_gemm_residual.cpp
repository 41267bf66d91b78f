#include "backends/cuda/fuse_gemm_residual.h"

#include "backends/cuda/lowering_pass.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

bool KernelFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Nodes that keep the elements in order: the reshape family, and a Transpose that only
// moves axes of size 1 (batch-1 exports of sequence-first attention).
bool Reshapes(const ir::Node* n) {
  if (!n || !n->domain.empty()) return false;
  if (n->op_type == "Reshape" || n->op_type == "Flatten" || n->op_type == "Squeeze" || n->op_type == "Unsqueeze")
    return true;
  if (n->op_type != "Transpose" || !n->input(0) || !n->input(0)->type.is_static()) return false;
  const Shape x = n->input(0)->type.static_shape();
  std::vector<int64_t> perm = n->attr_ints("perm");
  if (perm.empty())
    for (size_t i = x.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  if (perm.size() != x.size()) return false;
  int64_t last = -1;
  for (int64_t a : perm) {
    if (a < 0 || a >= static_cast<int64_t>(x.size())) return false;
    if (x[static_cast<size_t>(a)] == 1) continue;
    if (a < last) return false;
    last = a;
  }
  return true;
}

// A row bias the GEMM kernel adds in cuBLASLt's bias epilogue (gemm_kernel.cpp), which
// leaves C free for the residual: `n` elements, laid along the last axis.
bool RowBias(const ir::Value* b, int64_t n) {
  if (!b || !b->type.is_static() || n <= 1) return false;
  const Shape s = b->type.static_shape();
  return NumElements(s) == n && !s.empty() && s.back() == n;
}

// The product a residual can join: no activation (act(P) + r is not act(P + r)), no
// residual yet, and its third input (if any) a row bias.
bool Joinable(const ir::Node* p) {
  if (!p || !p->output(0) || !p->output(0)->type.is_static()) return false;
  const bool gemm = (p->domain.empty() && p->op_type == "Gemm") || (p->domain == "sampan" && p->op_type == "FusedGemm");
  const bool matmul =
      (p->domain.empty() && p->op_type == "MatMul") || (p->domain == "sampan" && p->op_type == "FusedMatMul");
  if (!gemm && !matmul) return false;
  if (!p->attr_string("activation", "").empty()) return false;
  if (p->num_inputs() > 3 && p->input(3)) return false;
  const Shape y = p->output(0)->type.static_shape();
  if (y.size() < 2) return false;
  if (p->num_inputs() > 2 && p->input(2)) {
    if (gemm && p->attr_float("beta", 1.f) != 1.f) return false;
    if (!RowBias(p->input(2), y.back())) return false;
  }
  return true;
}

struct Match {
  ir::Node* add = nullptr;
  ir::Node* product = nullptr;
  std::vector<ir::Node*> chain;  //!< reshapes from the product to the Add, in order
  ir::Value* residual = nullptr;
};

std::optional<Match> NextMatch(const ir::Graph& g) {
  for (const auto& up : g.nodes()) {
    ir::Node* add = up.get();
    if (!passes::Is(add, "Add") || add->num_inputs() != 2 || !add->input(0) || !add->input(1)) continue;
    const ir::Value* out = add->output(0);
    if (!out || !KernelFloat(out->type.dtype)) continue;
    for (int side = 0; side < 2; ++side) {
      ir::Value* x = add->input(static_cast<size_t>(side));
      ir::Value* r = add->input(static_cast<size_t>(1 - side));
      if (x == r || r->type.dtype != out->type.dtype || x->type.dtype != out->type.dtype) continue;
      if (!passes::SameShape(x->type, out->type) || !passes::SameShape(r->type, out->type)) continue;
      if (!passes::HasSingleUse(g, x)) continue;
      Match m;
      m.add = add;
      m.residual = r;
      ir::Value* v = x;
      while (Reshapes(v->producer()) && v->producer()->input(0) && passes::HasSingleUse(g, v->producer()->input(0))) {
        m.chain.insert(m.chain.begin(), v->producer());
        v = v->producer()->input(0);
      }
      if (!Joinable(v->producer())) continue;
      m.product = v->producer();
      return m;
    }
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<std::string>> FuseGemmResidual(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  while (std::optional<Match> m = NextMatch(g)) {
    ir::Node* p = m->product;
    ir::Value* out = m->add->output(0);
    const std::string add_label = m->add->Label(), p_label = p->Label(), add_name = m->add->name;
    // The residual in the product's shape (a view on the device).
    ir::Value* z = m->residual;
    if (!m->chain.empty()) {
      const Shape ys = p->output(0)->type.static_shape();
      Tensor shape = Tensor::Alloc(DType::kInt64, {static_cast<int64_t>(ys.size())});
      for (size_t i = 0; i < ys.size(); ++i) shape.mutable_data<int64_t>()[i] = ys[i];
      SP_ASSIGN_OR_RETURN(ir::Value * sv, g.AddConstant(g.FreshName(p->name + "_residual_shape"), std::move(shape)));
      SP_ASSIGN_OR_RETURN(ir::Value * zr, g.AddValue(g.FreshName(p->name + "_residual")));
      SP_RETURN_IF_ERROR(g.AddNode("Reshape", {z, sv}, {zr}, g.FreshName(p->name + "_residual_view")).status());
      z = zr;
    }
    const bool gemm = p->op_type == "Gemm" || p->op_type == "FusedGemm";
    std::vector<ir::Value*> inputs = {p->input(0), p->input(1), p->num_inputs() > 2 ? p->input(2) : nullptr, z};
    // The Add's output is produced by the last node of the chain (or the product) itself.
    g.RemoveNode(m->add);
    if (m->chain.empty()) {
      SP_RETURN_IF_ERROR(
          passes::ReplaceWithFused(g, {p}, "sampan", gemm ? "FusedGemm" : "FusedMatMul", p->name, inputs, p->attrs, out)
              .status());
    } else {
      ir::Node* last = m->chain.back();
      const std::string op = last->op_type, name = last->name;
      const auto attrs = last->attrs;
      const std::vector<ir::Value*> ins(last->inputs().begin(), last->inputs().end());
      g.RemoveNode(last);
      SP_ASSIGN_OR_RETURN(ir::Node * nl, g.AddNode(op, ins, {out}, name));
      nl->attrs = attrs;
      SP_RETURN_IF_ERROR(passes::ReplaceWithFused(g, {p}, "sampan", gemm ? "FusedGemm" : "FusedMatMul", p->name, inputs,
                                                  p->attrs, p->output(0))
                             .status());
    }
    plan.choices.erase(add_name);
    done.push_back(StrCat("cuda: residual ", add_label, " joins ", p_label, " (cuBLASLt's C operand)"));
    plan.rewrites.push_back(done.back());
    SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  }
  return done;
}

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_gemm_residual", (PlanRewritePass<FuseGemmResidual>));

}  // namespace sampan::cuda
