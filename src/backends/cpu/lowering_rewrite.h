#pragma once

// The loop the cpu backend's lowering rewrites share (factor_residual_scale.h,
// fuse_conv_output_affine.h): one rewrite at a time, at the first node that matches, from the
// start again after each (a rewrite invalidates the node list), until none matches.

#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace sampan::cpu {

//! One rewrite at `node`: true when the graph changed (then *line says what), false (graph
//! untouched) when it does not match.
using NodeRewrite = Result<bool> (*)(ir::Graph& g, ir::Node* node, std::string* line);

//! Applies `at` until no node matches, then re-sorts, verifies and infers the graph
//! (passes::FinishRewrite) if anything changed. Returns one line per rewrite.
Result<std::vector<std::string>> RewriteUntilNoneMatches(plan::Plan& plan, NodeRewrite at);

}  // namespace sampan::cpu
