// Shared by the fusion passes: recognising activations and swapping a chain of
// nodes for one fused node.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"

namespace sampan::passes {

struct ActivationMatch {
  std::string activation;     //!< fused.h name: Relu, Clip, SiLU, ...
  std::vector<float> params;
  std::vector<ir::Node*> nodes;  //!< the nodes the activation consists of (1, or 2 for SiLU)
  ir::Value* output = nullptr;   //!< the activation's result
};

//! If `v`'s only consumer(s) form an activation of v, describes it.
std::optional<ActivationMatch> MatchActivation(const ir::Graph& graph, ir::Value* v);

//! Removes `old_nodes`, then adds `op_type` (domain "sampan" unless empty) with
//! the given inputs/attributes producing `output`. Returns the new node.
Result<ir::Node*> ReplaceWithFused(ir::Graph& graph, const std::vector<ir::Node*>& old_nodes,
                                   const std::string& domain, const std::string& op_type, const std::string& name,
                                   const std::vector<ir::Value*>& inputs,
                                   const std::map<std::string, ir::Attribute>& attrs, ir::Value* output);

//! Float types the fused epilogues handle.
bool IsFusableFloat(DType t);

}  // namespace sampan::passes
