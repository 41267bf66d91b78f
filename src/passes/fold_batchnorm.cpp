// Folds an inference BatchNormalization into the Conv, ConvTranspose or Gemm that feeds it:
//   y = scale * (conv(x, W) + b - mean) / sqrt(var + eps) + B
//     = conv(x, W * k) + (b - mean) * k + B,   k = scale / sqrt(var + eps)
// k is per output channel: dim 0 of a Conv weight [M, C/g, kh, kw], dim 1 (within each
// group) of a ConvTranspose weight [C, M/g, kh, kw]; for Gemm the output column, i.e. a row
// of B^T.
#include <cmath>

#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

// Per-channel float vector of a constant 1-D tensor of length n, or empty.
std::vector<double> ChannelVector(const ir::Value* v, int64_t n) {
  if (v == nullptr || !v->is_constant() || v->data.numel() != n || !IsFloatDType(v->data.dtype())) return {};
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = ElementAsDouble(v->data, i);
  return out;
}

}  // namespace

Result<bool> TryFoldBatchNorm(ir::Graph& graph, ir::Node* bn, PassContext& ctx) {
  if (bn->op_type != "BatchNormalization" || !bn->domain.empty() || bn->num_inputs() < 5) return false;
  if (bn->attr_int("training_mode", 0) != 0) return false;
  bool extra_outputs = false;
  for (size_t i = 1; i < bn->num_outputs(); ++i) extra_outputs |= bn->output(i) != nullptr;
  if (extra_outputs) return false;
  ir::Value* x = bn->input(0);
  ir::Node* producer = x->producer();
  if (producer == nullptr || !producer->domain.empty() || !HasSingleUse(graph, x)) return false;
  const bool is_conv = producer->op_type == "Conv" || producer->op_type == "ConvTranspose";
  const bool is_gemm = producer->op_type == "Gemm";
  if (!is_conv && !is_gemm) return false;
  ir::Value* w = producer->input(1);
  if (w == nullptr || !w->is_constant() || !IsFloatDType(w->data.dtype())) return false;
  const Tensor& wt = w->data;
  int64_t channels;
  bool gemm_trans_b = false;
  if (is_conv) {
    channels = ConvOutputChannels(*producer, wt);
    if (channels == 0) return false;
  } else {
    if (wt.rank() != 2 || producer->attr_int("transA", 0) != 0) return false;
    if (producer->attr_float("alpha", 1.f) != 1.f || producer->attr_float("beta", 1.f) != 1.f) return false;
    gemm_trans_b = producer->attr_int("transB", 0) != 0;
    channels = gemm_trans_b ? wt.dim(0) : wt.dim(1);
  }
  auto scale = ChannelVector(bn->input(1), channels);
  auto beta = ChannelVector(bn->input(2), channels);
  auto mean = ChannelVector(bn->input(3), channels);
  auto var = ChannelVector(bn->input(4), channels);
  if (scale.empty() || beta.empty() || mean.empty() || var.empty()) return false;
  std::vector<double> bias(static_cast<size_t>(channels), 0.0);
  ir::Value* b = producer->input(2);
  if (b != nullptr) {
    // Gemm's C broadcasts: only [N] or [1, N] is one value per output column.
    if (is_gemm && b->is_constant() && !(b->data.rank() == 1 || (b->data.rank() == 2 && b->data.dim(0) == 1)))
      return false;
    bias = ChannelVector(b, channels);
    if (bias.empty()) return false;  // broadcast or non-constant Gemm C: leave it
  }
  const double eps = bn->attr_float("epsilon", 1e-5f);

  Tensor new_w = *CastTensor(wt, DType::kFloat64);
  double* pw = new_w.mutable_data<double>();
  std::vector<double> k(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) k[c] = scale[c] / std::sqrt(var[c] + eps);
  if (is_conv) {
    ScaleConvOutputChannels(*producer, &new_w, k);
  } else if (gemm_trans_b) {
    const int64_t per = wt.numel() / channels;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < per; ++i) pw[c * per + i] *= k[c];
  } else {  // Gemm B is [K, N]: channel = column
    const int64_t rows = wt.dim(0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < channels; ++c) pw[r * channels + c] *= k[c];
  }
  Tensor new_b = Tensor::Alloc(DType::kFloat64, {channels});
  for (int64_t c = 0; c < channels; ++c) new_b.mutable_data<double>()[c] = (bias[c] - mean[c]) * k[c] + beta[c];

  SP_ASSIGN_OR_RETURN(Tensor w_cast, CastTensor(new_w, wt.dtype()));
  SP_ASSIGN_OR_RETURN(Tensor b_cast, CastTensor(new_b, wt.dtype()));
  ir::Value* bn_out = bn->output(0);
  if (!CanForward(graph, bn_out, x)) return false;
  SP_ASSIGN_OR_RETURN(ir::Value * w_val, graph.AddConstant(graph.FreshName(w->name() + "_bnfolded"), w_cast));
  SP_ASSIGN_OR_RETURN(ir::Value * b_val, graph.AddConstant(graph.FreshName(producer->name + "_bias_bnfolded"), b_cast));
  producer->SetInput(1, w_val);
  producer->SetInput(2, b_val);
  ctx.Record(StrCat("folded ", bn->Label(), " into ", producer->Label()));
  SP_RETURN_IF_ERROR(ForwardValue(graph, bn_out, x));
  graph.RemoveNode(bn);
  return true;
}

namespace {

Result<bool> FoldBatchNorm(ir::Graph& graph, PassContext& ctx) {
  bool changed = false;
  std::vector<ir::Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  for (ir::Node* bn : nodes) {
    SP_ASSIGN_OR_RETURN(const bool folded, TryFoldBatchNorm(graph, bn, ctx));
    changed |= folded;
  }
  return changed;
}

}  // namespace

SAMPAN_REGISTER_PASS("fold_batchnorm", FoldBatchNorm);

}  // namespace sampan::passes
