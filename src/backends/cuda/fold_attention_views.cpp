#include "backends/cuda/fold_attention_views.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>

#include "backends/cuda/lowering_pass.h"
#include "ops/attention.h"
#include "ops/run_node.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

// ------------------------------------------------------------ strided views

// A view of a tensor's storage: each logical dim is a list of (size, stride) atoms, outer
// to inner (several when a reshape merged dims whose strides do not line up); no atoms:
// a dim of size 1.
struct Atom {
  int64_t size, stride;
  bool operator==(const Atom& o) const { return size == o.size && stride == o.stride; }
};
using VDim = std::vector<Atom>;
struct View {
  int64_t offset = 0;
  std::vector<VDim> dims;
};

int64_t Size(const VDim& d) {
  int64_t n = 1;
  for (const Atom& a : d) n *= a.size;
  return n;
}

std::vector<int64_t> KnownDims(const ir::Value* v) {
  return v && v->type.is_static() ? v->type.static_shape() : std::vector<int64_t>{};
}

std::optional<std::vector<int64_t>> ConstInts(const ir::Value* v) {
  if (!v || !v->is_constant()) return std::nullopt;
  const Tensor& t = v->data;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kInt64)
      out.push_back(t.data<int64_t>()[i]);
    else if (t.dtype() == DType::kInt32)
      out.push_back(t.data<int32_t>()[i]);
    else
      return std::nullopt;
  }
  return out;
}

View Strided(const std::vector<std::pair<int64_t, int64_t>>& dims, int64_t offset = 0) {
  View v;
  v.offset = offset;
  for (const auto& [size, stride] : dims) v.dims.push_back(size == 1 ? VDim{} : VDim{{size, stride}});
  return v;
}

View Contiguous(const std::vector<int64_t>& shape) {
  std::vector<std::pair<int64_t, int64_t>> d(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    d[i] = {shape[i], s};
    s *= shape[i];
  }
  return Strided(d);
}

// Size-1 atoms dropped, adjacent atoms merged where the outer one steps over the inner.
View Canonical(View v) {
  for (VDim& d : v.dims) {
    VDim out;
    for (const Atom& a : d) {
      if (a.size == 1) continue;
      if (!out.empty() && out.back().stride == a.size * a.stride) {
        out.back() = {out.back().size * a.size, a.stride};
      } else {
        out.push_back(a);
      }
    }
    d = std::move(out);
  }
  return v;
}

bool SameView(const View& a, const View& b) {
  const View x = Canonical(a), y = Canonical(b);
  return x.offset == y.offset && x.dims == y.dims;
}

bool Reshape(View* v, const std::vector<int64_t>& shape) {
  std::deque<Atom> atoms;
  for (const VDim& d : v->dims)
    for (const Atom& a : d)
      if (a.size != 1) atoms.push_back(a);
  std::vector<VDim> out;
  for (int64_t n : shape) {
    if (n <= 0) return false;
    VDim d;
    int64_t need = n;
    while (need > 1) {
      if (atoms.empty()) return false;
      Atom& a = atoms.front();
      if (need % a.size == 0) {
        d.push_back(a);
        need /= a.size;
        atoms.pop_front();
      } else if (a.size % need == 0) {  // split the atom: its outer part ends this dim
        d.push_back({need, a.stride * (a.size / need)});
        a.size /= need;
        need = 1;
      } else {
        return false;
      }
    }
    out.push_back(std::move(d));
  }
  if (!atoms.empty()) return false;
  v->dims = std::move(out);
  return true;
}

int64_t Axis(int64_t a, size_t rank) {
  return a < 0 ? a + static_cast<int64_t>(rank) : a;
}

bool IsScalarIndex(const ir::Value* idx) {
  return idx && idx->is_constant() && idx->data.numel() == 1 && idx->data.rank() <= 1 &&
         (idx->data.dtype() == DType::kInt64 || idx->data.dtype() == DType::kInt32);
}

bool IsViewOp(const ir::Node* n) {
  if (!n || !n->domain.empty() || n->num_inputs() < 1 || !n->input(0)) return false;
  const std::string& op = n->op_type;
  if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten" || op == "Identity" ||
      op == "Transpose")
    return true;
  if (op == "Gather") return IsScalarIndex(n->input(1));
  if (op == "Slice") {
    for (size_t i = 1; i < n->num_inputs(); ++i)
      if (n->input(i) && !ConstInts(n->input(i))) return false;
    return n->num_inputs() >= 3;
  }
  return false;
}

// The view of `n`'s output given the view of its input 0; false when it is not a view.
bool Apply(const ir::Node* n, View* v) {
  const std::vector<int64_t> out = KnownDims(n->output(0));
  if (out.empty() && !(n->output(0)->type.has_rank() && n->output(0)->type.dims->empty())) return false;
  const std::string& op = n->op_type;
  const size_t rank = v->dims.size();
  if (op == "Transpose") {
    std::vector<int64_t> perm = n->attr_ints("perm");
    if (perm.empty())
      for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    if (perm.size() != rank) return false;
    std::vector<VDim> d;
    for (int64_t p : perm) {
      const int64_t a = Axis(p, rank);
      if (a < 0 || a >= static_cast<int64_t>(rank)) return false;
      d.push_back(v->dims[static_cast<size_t>(a)]);
    }
    v->dims = std::move(d);
  } else if (op == "Gather") {
    const int64_t axis = Axis(n->attr_int("axis", 0), rank);
    if (axis < 0 || axis >= static_cast<int64_t>(rank)) return false;
    VDim& d = v->dims[static_cast<size_t>(axis)];
    int64_t idx = (*ConstInts(n->input(1)))[0];
    const int64_t size = Size(d);
    if (idx < 0) idx += size;
    if (idx < 0 || idx >= size) return false;
    for (size_t i = d.size(); i-- > 0;) {  // mixed radix, innermost atom first
      v->offset += (idx % d[i].size) * d[i].stride;
      idx /= d[i].size;
    }
    if (n->input(1)->data.rank() == 0) {
      v->dims.erase(v->dims.begin() + axis);
    } else {
      d.clear();
    }
  } else if (op == "Slice") {
    const auto starts = ConstInts(n->input(1)), ends = ConstInts(n->input(2));
    std::vector<int64_t> axes, steps;
    if (n->num_inputs() > 3 && n->input(3)) axes = *ConstInts(n->input(3));
    if (n->num_inputs() > 4 && n->input(4)) steps = *ConstInts(n->input(4));
    if (!starts || !ends || starts->size() != ends->size()) return false;
    if (axes.empty())
      for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts->size(), 1);
    if (axes.size() != starts->size() || steps.size() != starts->size()) return false;
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t axis = Axis(axes[i], rank);
      if (axis < 0 || axis >= static_cast<int64_t>(rank) || steps[i] <= 0) return false;
      VDim& d = v->dims[static_cast<size_t>(axis)];
      const int64_t size = Size(d);
      int64_t b = (*starts)[i], e = (*ends)[i];
      b = std::clamp(b < 0 ? b + size : b, int64_t{0}, size);
      e = std::clamp(e < 0 ? e + size : e, int64_t{0}, size);
      const int64_t len = e > b ? (e - b + steps[i] - 1) / steps[i] : 0;
      if (len == size) continue;  // the whole dim (step 1 from 0)
      if (len == 0 || d.size() != 1) return false;
      v->offset += b * d[0].stride;
      d = len == 1 ? VDim{} : VDim{{len, d[0].stride * steps[i]}};
    }
  } else if (!Reshape(v, out)) {  // Reshape, Squeeze, Unsqueeze, Flatten, Identity
    return false;
  }
  if (v->dims.size() != out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i)
    if (Size(v->dims[i]) != out[i]) return false;
  return true;
}

// ------------------------------------------------------------ the rewrite

bool PermIs(const ir::Node* t, const std::vector<int64_t>& perm) {
  if (!passes::Is(t, "Transpose")) return false;
  std::vector<int64_t> p = t->attr_ints("perm");
  for (int64_t& a : p) a = Axis(a, perm.size());
  return p == perm;
}

// One step of an operand's chain: the node and which of its inputs continues the chain.
struct Step {
  ir::Node* node;
  size_t input;
  bool scale;  //!< a multiplication/division by a constant (no change to the view)
};

// Follows `v` back through view ops (and, for Q, constant scalings); the value reached
// is the base. Steps closest to v first.
ir::Value* ChainBack(ir::Value* v, bool allow_scale, std::vector<Step>* chain, double* factor) {
  ir::Value* cur = v;
  for (int guard = 0; guard < 64; ++guard) {
    ir::Node* n = cur->producer();
    if (IsViewOp(n)) {
      chain->push_back({n, 0, false});
      cur = n->input(0);
      continue;
    }
    if (allow_scale && (passes::Is(n, "Div") || passes::Is(n, "Mul")) && n->num_inputs() == 2 &&
        KnownDims(n->output(0)) == KnownDims(n->input(0))) {
      const auto c1 = passes::ScalarConst(n->input(1));
      if (c1 && *c1 != 0.0 && !n->input(0)->is_constant()) {
        *factor *= passes::Is(n, "Div") ? 1.0 / *c1 : *c1;
        chain->push_back({n, 0, true});
        cur = n->input(0);
        continue;
      }
    }
    break;
  }
  return cur;
}

bool ApplyChain(const std::vector<Step>& chain, View* v) {
  for (size_t i = chain.size(); i-- > 0;)
    if (!chain[i].scale && !Apply(chain[i].node, v)) return false;
  return true;
}

// The longest forward run of single-use view ops from `v`, applied to `view`; stops
// before an op that is not a view. Returns the nodes and, per prefix, the view after it.
void ChainForward(const ir::Graph& g, ir::Value* v, View view, std::vector<ir::Node*>* nodes,
                  std::vector<View>* views) {
  ir::Value* cur = v;
  for (int guard = 0; guard < 64; ++guard) {
    ir::Node* n = passes::SoleUser(g, cur);
    if (!IsViewOp(n) || n->input(0) != cur || !Apply(n, &view)) return;
    nodes->push_back(n);
    views->push_back(view);
    cur = n->output(0);
  }
}

bool IsContiguous(const View& v, const std::vector<int64_t>& shape) {
  return SameView(v, Contiguous(shape));
}

// A row-wise projection reading `r` [M, K] as its first operand.
bool RowWise(const ir::Node* n, const ir::Value* r) {
  if (!n || n->input(0) != r) return false;
  if (passes::Is(n, "Gemm")) return n->attr_int("transA", 0) == 0;
  return n->domain == "sampan" && n->op_type == "FusedMatMul" && (n->num_inputs() < 4 || !n->input(3));
}

}  // namespace

Result<std::vector<std::string>> FoldAttentionViews(plan::Plan& plan, int cc_major) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  if (cc_major < 8) return done;
  std::vector<ir::Node*> attentions;
  for (const auto& n : g.nodes())
    if (n->domain == "sampan" && n->op_type == "Attention" &&
        n->attr_string(ops::kAttentionLayoutAttr, ops::kAttentionBhsd) == ops::kAttentionBhsd && n->num_inputs() >= 3 &&
        n->input(0) && n->input(1) && n->input(2))
      attentions.push_back(n.get());
  for (ir::Node* attn : attentions) {
    const DType dt = attn->input(0)->type.dtype;
    if (dt != DType::kFloat16 && dt != DType::kBFloat16) continue;
    const std::vector<int64_t> qd = KnownDims(attn->input(0));
    if ((qd.size() != 3 && qd.size() != 4) || qd.back() > 128) continue;
    const size_t rank = qd.size();
    const int64_t d = qd.back(), s_len = qd[rank - 2];
    const bool kt = attn->attr_int("k_transposed", 0) != 0;

    double factor = 1.0;
    std::vector<Step> chains[3];
    ir::Value* base = nullptr;
    bool same = true;
    for (int i = 0; i < 3 && same; ++i) {
      if (!passes::HasSingleUse(g, attn->input(static_cast<size_t>(i)))) same = false;
      ir::Value* b = ChainBack(attn->input(static_cast<size_t>(i)), i == 0, &chains[i], &factor);
      if (chains[i].empty() || (base && b != base)) same = false;
      base = b;
    }
    if (!same || !base || passes::IsGraphOutput(g, base)) continue;
    const std::vector<int64_t> pd = KnownDims(base);
    if (pd.size() != 3 || pd[2] % 3 != 0) continue;
    // A sequence-first projection: P = FusedMatMul(Transpose(x) {perm=[1,0,2]}, W, b?).
    ir::Node* mm = base->producer();
    ir::Node* xt = mm ? mm->input(0)->producer() : nullptr;
    const bool seq_first = mm && mm->domain == "sampan" && mm->op_type == "FusedMatMul" &&
                           mm->attr_string("activation", "").empty() && (mm->num_inputs() < 4 || !mm->input(3)) &&
                           mm->input(1) && mm->input(1)->is_constant() && mm->input(1)->data.rank() == 2 &&
                           PermIs(xt, {1, 0, 2}) && passes::HasSingleUse(g, mm->input(0));
    const int64_t n3 = pd[2], e = n3 / 3;
    const int64_t b = seq_first ? pd[1] : pd[0];
    if ((seq_first ? pd[0] : pd[1]) != s_len || e % d != 0) continue;
    const int64_t h = e / d;
    // The base in the storage of the [B, S, 3E] projection the attention will read.
    const View start = seq_first ? Strided({{s_len, n3}, {b, s_len * n3}, {n3, 1}}) : Contiguous(pd);
    auto expect = [&](int part) {
      View v;
      v.offset = part * e;
      VDim bd = {{b, s_len * n3}}, hd = {{h, d}};
      if (rank == 4) {
        v.dims = {bd, hd};
      } else {
        bd.push_back(hd[0]);
        v.dims = {bd};
      }
      const VDim sd = {{s_len, n3}}, dd = {{d, 1}};
      if (part == 1 && kt) {
        v.dims.push_back(dd);
        v.dims.push_back(sd);
      } else {
        v.dims.push_back(sd);
        v.dims.push_back(dd);
      }
      return v;
    };
    bool views_ok = true;
    for (int i = 0; i < 3 && views_ok; ++i) {
      View v = start;
      views_ok = ApplyChain(chains[i], &v) && SameView(v, expect(i));
    }
    if (!views_ok) continue;
    // Every value the chains make is read only inside them (or by the attention).
    std::set<const ir::Node*> in_chain;
    for (const auto& c : chains)
      for (const Step& st : c) in_chain.insert(st.node);
    bool closed = true;
    for (const ir::Node* n : in_chain)
      for (const ir::Value* o : n->outputs()) {
        if (!o) continue;
        if (passes::IsGraphOutput(g, o)) closed = false;
        for (const auto& use : o->uses()) closed = closed && (in_chain.count(use.first) || use.first == attn);
      }
    if (seq_first)
      for (const auto& use : base->uses()) closed = closed && in_chain.count(use.first);
    if (!closed) continue;

    // The output side, against the new [B, S, H, D] output.
    ir::Value* old_out = attn->output(0);
    View out_start = rank == 4 ? Strided({{b, s_len * e}, {h, d}, {s_len, e}, {d, 1}})
                               : View{0, {{{b, s_len * e}, {h, d}}, {{s_len, e}}, {{d, 1}}}};
    std::vector<ir::Node*> fwd;
    std::vector<View> fviews;
    ChainForward(g, old_out, out_start, &fwd, &fviews);
    // (a) the longest prefix that is a plain reshape of the new output;
    size_t plain = 0;
    for (size_t i = 0; i < fwd.size(); ++i)
      if (IsContiguous(fviews[i], KnownDims(fwd[i]->output(0)))) plain = i + 1;
    // (b) rows [S*B, E] in (s, b) order into one row-wise projection, whose output chain
    // reads them back in [B, S] order.
    size_t rows_at = 0, back_len = 0;
    ir::Node* proj = nullptr;
    std::vector<ir::Node*> back;
    if (plain == 0) {
      const View rows = View{0, {{{s_len, e}, {b, s_len * e}}, {{e, 1}}}};
      for (size_t i = 0; i < fwd.size() && !proj; ++i) {
        if (!SameView(fviews[i], rows)) continue;
        ir::Node* p = passes::SoleUser(g, fwd[i]->output(0));
        const std::vector<int64_t> yd = p ? KnownDims(p->output(0)) : std::vector<int64_t>{};
        if (!RowWise(p, fwd[i]->output(0)) || yd.size() != 2 || yd[0] != s_len * b) continue;
        std::vector<View> bviews;
        std::vector<ir::Node*> bn;
        ChainForward(g, p->output(0), View{0, {{{s_len, yd[1]}, {b, s_len * yd[1]}}, {{yd[1], 1}}}}, &bn, &bviews);
        for (size_t j = 0; j < bn.size(); ++j)
          if (IsContiguous(bviews[j], KnownDims(bn[j]->output(0)))) back_len = j + 1;
        if (back_len == 0) continue;
        proj = p;
        rows_at = i + 1;
        back = std::move(bn);
      }
    }

    // Rewrite. New nodes get the precision of the attention's choice; the capability
    // query and the tactic timing that follow the lowering rewrites fill in the rest.
    const std::string attn_name = attn->name, attn_label = attn->Label();
    plan::NodeChoice view_choice = plan.choices.count(attn_name) ? plan.choices.at(attn_name) : plan::NodeChoice{};
    view_choice.tactic = {};
    std::map<std::string, ir::Attribute> attrs = attn->attrs;
    attrs[ops::kAttentionLayoutAttr] = ir::Attribute::String(ops::kAttentionBs3hd);
    attrs["k_transposed"] = ir::Attribute::Int(0);
    attrs["scale"] = ir::Attribute::Float(static_cast<float>(attn->attr_float("scale", 1.f) * factor));
    ir::Value* mask = attn->num_inputs() > 3 ? attn->input(3) : nullptr;
    std::vector<std::string> removed;
    auto remove = [&](ir::Node* n) {
      removed.push_back(n->name);
      g.RemoveNode(n);
    };
    auto add = [&](const std::string& op, const std::vector<ir::Value*>& ins, ir::Value* out,
                   const std::string& name) -> Result<ir::Node*> {
      SP_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(op, ins, {out}, g.FreshName(name)));
      plan.choices[n->name] = view_choice;
      return n;
    };
    auto shape_const = [&](const std::string& hint, const std::vector<int64_t>& dims) -> Result<ir::Value*> {
      return g.AddConstant(g.FreshName(hint),
                           Tensor::FromVector<int64_t>(DType::kInt64, dims, {static_cast<int64_t>(dims.size())}));
    };
    // The [B, S, 3E] projection.
    ir::Value* packed_src = base;
    if (seq_first) {
      const std::string mm_name = mm->name;
      plan::NodeChoice mm_choice = plan.choices.count(mm_name) ? plan.choices.at(mm_name) : view_choice;
      mm_choice.tactic = {};  // a new shape: timed after the rewrite
      std::vector<ir::Value*> ins = {xt->input(0), mm->input(1)};
      if (mm->num_inputs() > 2) ins.push_back(mm->input(2));
      const std::map<std::string, ir::Attribute> mm_attrs = mm->attrs;
      remove(mm);
      remove(xt);
      SP_ASSIGN_OR_RETURN(packed_src, g.AddValue(g.FreshName(mm_name + "_bs")));
      SP_ASSIGN_OR_RETURN(ir::Node * nm, g.AddNode("FusedMatMul", ins, {packed_src}, g.FreshName(mm_name + "_bs")));
      nm->domain = "sampan";
      nm->attrs = mm_attrs;
      plan.choices[nm->name] = mm_choice;
    }
    for (const ir::Node* n : in_chain) remove(const_cast<ir::Node*>(n));
    SP_ASSIGN_OR_RETURN(ir::Value * shape5, shape_const(attn_name + "_bs3hd_shape", {b, s_len, 3, h, d}));
    SP_ASSIGN_OR_RETURN(ir::Value * packed, g.AddValue(g.FreshName(attn_name + "_bs3hd")));
    SP_RETURN_IF_ERROR(add("Reshape", {packed_src, shape5}, packed, attn_name + "_bs3hd").status());
    remove(attn);
    SP_ASSIGN_OR_RETURN(ir::Value * new_out, g.AddValue(g.FreshName(attn_name + "_bshd")));
    std::vector<ir::Value*> att_in = {packed, nullptr, nullptr};
    if (mask) att_in.push_back(mask);
    SP_ASSIGN_OR_RETURN(ir::Node * na, g.AddNode("Attention", att_in, {new_out}, attn_name));
    na->domain = "sampan";
    na->attrs = attrs;
    std::string how;
    if (plain > 0) {
      ir::Value* r = fwd[plain - 1]->output(0);
      for (size_t i = 0; i < plain; ++i) remove(fwd[i]);
      SP_ASSIGN_OR_RETURN(ir::Value * sh, shape_const(attn_name + "_out_shape", KnownDims(r)));
      SP_RETURN_IF_ERROR(add("Reshape", {new_out, sh}, r, attn_name + "_out").status());
      how = StrCat("its output read through ", plain, " view ops became a reshape");
    } else if (proj) {
      ir::Value* r = fwd[rows_at - 1]->output(0);
      ir::Value* f = back[back_len - 1]->output(0);
      for (size_t i = 0; i < rows_at; ++i) remove(fwd[i]);
      for (size_t i = 0; i < back_len; ++i) remove(back[i]);
      SP_ASSIGN_OR_RETURN(ir::Value * sh, shape_const(attn_name + "_rows_shape", {b * s_len, e}));
      SP_RETURN_IF_ERROR(add("Reshape", {new_out, sh}, r, attn_name + "_rows").status());
      SP_ASSIGN_OR_RETURN(ir::Value * fs, shape_const(attn_name + "_proj_shape", KnownDims(f)));
      SP_RETURN_IF_ERROR(add("Reshape", {proj->output(0), fs}, f, proj->name + "_bs").status());
      how = StrCat(proj->Label(), " reads its rows in [B, S] order (", rows_at + back_len, " view ops went)");
    } else {
      // Back to the old layout: [B, S, H, D] -> [B, H, S, D] (-> [B*H, S, D]).
      ir::Value* t = old_out;
      if (rank == 3) {
        SP_ASSIGN_OR_RETURN(t, g.AddValue(g.FreshName(attn_name + "_bhsd")));
      }
      SP_ASSIGN_OR_RETURN(ir::Node * tn, add("Transpose", {new_out}, t, attn_name + "_bhsd"));
      tn->attrs["perm"] = ir::Attribute::Ints({0, 2, 1, 3});
      if (rank == 3) {
        SP_ASSIGN_OR_RETURN(ir::Value * sh, shape_const(attn_name + "_bhsd_shape", qd));
        SP_RETURN_IF_ERROR(add("Reshape", {t, sh}, old_out, attn_name + "_bhsd_rs").status());
      }
      how = "one transpose restores its old output layout";
    }
    for (const std::string& name : removed)
      if (name != attn_name) plan.choices.erase(name);
    done.push_back(StrCat("cuda: ", attn_label, " reads Q, K and V packed from one projection (", in_chain.size(),
                          " view nodes", seq_first ? ", sequence-first projection re-ordered" : "",
                          factor != 1.0 ? ", Q's scaling folded" : "", "); ", how));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

SAMPAN_REGISTER_TARGET_PASS("cuda", "fold_attention_views", (PlanRewritePassCc<FoldAttentionViews>));

}  // namespace sampan::cuda
