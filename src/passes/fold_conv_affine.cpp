// Folds a per-output-channel affine that follows a Conv or ConvTranspose into it:
//   Mul(conv(x, W, b), s)  ->  conv(x, W * s[c], b * s[c])
//   Add(conv(x, W, b), a)  ->  conv(x, W, b + a[c])
// where s / a are constants holding one value per output channel ([C,1,1],
// [1,C,1,1]) or a single value. Exporters write learnable scales (MobileOne and
// RepVGG blocks in PaddleOCR, layer scale) this way, and Paddle's exporter writes a
// ConvTranspose's bias as an Add of a [C,1,1] constant (the PP-OCR detector's head); once
// folded, the activation after them can fuse, and a BatchNormalization after them folds here
// too (fold_batchnorm ran before and saw the Add between).
#include <set>

#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

// Per-channel values of `v` broadcast against a conv output of rank `rank`
// with `channels` channels (axis 1), or empty when v is not of that form.
std::vector<double> ChannelAffine(const ir::Value* v, int64_t rank, int64_t channels) {
  if (v == nullptr || !v->is_constant() || !IsFloatDType(v->data.dtype())) return {};
  const Tensor& t = v->data;
  if (t.rank() > rank) return {};
  const int64_t channel_axis = 1 - (rank - t.rank());  // axis 1 of the output, right-aligned
  int64_t per = 1;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d == channel_axis)
      per = t.dim(d);
    else if (t.dim(d) != 1)
      return {};
  }
  if (per != 1 && per != channels) return {};
  std::vector<double> out(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) out[static_cast<size_t>(c)] = ElementAsDouble(t, per == 1 ? 0 : c);
  return out;
}

Result<bool> FoldConvAffine(ir::Graph& graph, PassContext& ctx) {
  bool changed = false;
  std::vector<ir::Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  std::set<ir::Node*> removed;
  for (ir::Node* op : nodes) {
    if (removed.count(op) || !op->domain.empty()) continue;
    if (op->op_type == "BatchNormalization") {  // after an Add or Mul folded here (a bias, then BN)
      if (ctx.disabled.count("fold_batchnorm")) continue;
      SP_ASSIGN_OR_RETURN(const bool folded, TryFoldBatchNorm(graph, op, ctx));
      if (folded) removed.insert(op);
      changed |= folded;
      continue;
    }
    if (op->op_type != "Mul" && op->op_type != "Add") continue;
    const bool is_mul = op->op_type == "Mul";
    for (int side = 0; side < 2; ++side) {
      ir::Value* x = op->input(static_cast<size_t>(side));
      ir::Value* k = op->input(static_cast<size_t>(1 - side));
      ir::Node* conv = x ? x->producer() : nullptr;
      if (conv == nullptr || !conv->domain.empty() || !HasSingleUse(graph, x)) continue;
      if (conv->op_type != "Conv" && conv->op_type != "ConvTranspose") continue;
      ir::Value* w = conv->input(1);
      if (w == nullptr || !w->is_constant() || !IsFloatDType(w->data.dtype())) continue;
      const int64_t channels = ConvOutputChannels(*conv, w->data);
      if (channels == 0) continue;
      if (!x->type.dims || static_cast<int64_t>(x->type.dims->size()) != w->data.rank()) continue;
      if (!op->output(0) || op->output(0)->type.dtype != x->type.dtype || !op->output(0)->type.dims ||
          op->output(0)->type.dims->size() != x->type.dims->size())
        continue;  // the constant must not broadcast the result to another shape
      std::vector<double> f = ChannelAffine(k, w->data.rank(), channels);
      if (f.empty()) continue;
      std::vector<double> bias(static_cast<size_t>(channels), 0.0);
      ir::Value* b = conv->input(2);
      if (b != nullptr) {
        if (!b->is_constant() || b->data.numel() != channels) continue;
        for (int64_t c = 0; c < channels; ++c) bias[static_cast<size_t>(c)] = ElementAsDouble(b->data, c);
      }
      const DType dt = w->data.dtype();
      ir::Value* new_w = w;
      if (is_mul) {
        Tensor nw = *CastTensor(w->data, DType::kFloat64);
        ScaleConvOutputChannels(*conv, &nw, f);
        for (int64_t c = 0; c < channels; ++c) bias[static_cast<size_t>(c)] *= f[static_cast<size_t>(c)];
        SP_ASSIGN_OR_RETURN(Tensor wc, CastTensor(nw, dt));
        SP_ASSIGN_OR_RETURN(new_w, graph.AddConstant(graph.FreshName(w->name() + "_scaled"), wc));
      } else {
        for (int64_t c = 0; c < channels; ++c) bias[static_cast<size_t>(c)] += f[static_cast<size_t>(c)];
      }
      Tensor nb = Tensor::Alloc(DType::kFloat64, {channels});
      for (int64_t c = 0; c < channels; ++c) nb.mutable_data<double>()[c] = bias[static_cast<size_t>(c)];
      SP_ASSIGN_OR_RETURN(Tensor bc, CastTensor(nb, dt));
      ir::Value* out = op->output(0);
      if (!CanForward(graph, out, x)) continue;
      SP_ASSIGN_OR_RETURN(ir::Value * new_b, graph.AddConstant(graph.FreshName(conv->name + "_bias_affine"), bc));
      conv->SetInput(1, new_w);
      conv->SetInput(2, new_b);  // adds the bias input when the conv had none
      ctx.Record(
          StrCat("folded ", op->Label(), " (per-channel ", is_mul ? "scale" : "shift", ") into ", conv->Label()));
      SP_RETURN_IF_ERROR(ForwardValue(graph, out, x));
      graph.RemoveNode(op);
      removed.insert(op);
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace

SAMPAN_REGISTER_PASS("fold_conv_affine", FoldConvAffine);

}  // namespace sampan::passes
