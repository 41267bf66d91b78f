// Shared by the fusion passes: recognising activations and swapping a chain of
// nodes for one fused node.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/fused.h"
#include "passes/pass.h"

namespace sampan::passes {

struct ActivationMatch {
  ops::FusedActivation act;      //!< what the fused node's epilogue computes
  std::vector<ir::Node*> nodes;  //!< the nodes the activation consists of (1, or 2 for SiLU)
  ir::Value* output = nullptr;   //!< the activation's result
};

//! If `v`'s only consumer(s) form an activation of v, describes it.
std::optional<ActivationMatch> MatchActivation(const ir::Graph& graph, ir::Value* v);

//! Removes `old_nodes`, then adds `op_type` (domain "sampan" unless empty) with
//! the given inputs/attributes producing `output`. Returns the new node.
Result<ir::Node*> ReplaceWithFused(ir::Graph& graph, const std::vector<ir::Node*>& old_nodes, const std::string& domain,
                                   const std::string& op_type, const std::string& name,
                                   const std::vector<ir::Value*>& inputs,
                                   const std::map<std::string, ir::Attribute>& attrs, ir::Value* output);
//! The same with several outputs (nullptr: an omitted optional output).
Result<ir::Node*> ReplaceWithFused(ir::Graph& graph, const std::vector<ir::Node*>& old_nodes, const std::string& domain,
                                   const std::string& op_type, const std::string& name,
                                   const std::vector<ir::Value*>& inputs,
                                   const std::map<std::string, ir::Attribute>& attrs,
                                   const std::vector<ir::Value*>& outputs);

//! Output channels of a Conv (weight [M, C/g, k...]) or ConvTranspose (weight [C, M/g, k...],
//! `group` groups) whose weight is `w`; 0 for other nodes or weights of another form.
int64_t ConvOutputChannels(const ir::Node& conv, const Tensor& w);
//! Multiplies the weights of output channel c by f[c] (w64: that node's weight as float64).
void ScaleConvOutputChannels(const ir::Node& conv, Tensor* w64, const std::vector<double>& f);

//! Folds inference BatchNormalization `bn` into the Conv, ConvTranspose or Gemm feeding it
//! (fold_batchnorm.cpp); false (graph untouched) when it does not apply. Removes `bn`.
Result<bool> TryFoldBatchNorm(ir::Graph& graph, ir::Node* bn, PassContext& ctx);

//! Float types the fused epilogues handle.
bool IsFusableFloat(DType t);

//! True when both shapes are provably equal: same rank, and each dimension the same
//! known size or the same named symbol ("N" and "N"); anonymous unknown sizes never match.
bool SameShape(const ir::TensorType& a, const ir::TensorType& b);

//! n is a default-domain node of type `op`.
inline bool Is(const ir::Node* n, const char* op) {
  return n && n->op_type == op && n->domain.empty();
}
//! The only node reading v (nullptr if v has several readers or is a graph output).
inline ir::Node* SoleUser(const ir::Graph& g, const ir::Value* v) {
  return HasSingleUse(g, v) ? v->uses()[0].first : nullptr;
}
//! The operand of binary node n that is not v.
inline ir::Value* Other(const ir::Node* n, const ir::Value* v) {
  return n->input(0) == v ? n->input(1) : n->input(0);
}
//! Value of a constant one-element float tensor.
std::optional<double> ScalarConst(const ir::Value* v);

//! After rewriting nodes outside the pass manager (a backend's lowering rewrites): drops
//! values nothing reads, re-sorts, verifies and infers the types again.
Status FinishRewrite(ir::Graph& graph);

//! Applies a one-rewrite matcher until it finds nothing more; true if anything changed.
//! (Matchers return after each rewrite because rewriting invalidates node iteration.)
Result<bool> RewriteToFixpoint(ir::Graph& graph, PassContext& ctx, Result<bool> (*match_one)(ir::Graph&, PassContext&));

}  // namespace sampan::passes
