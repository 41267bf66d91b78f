// The cuda backend's lowering rewrites as passes of the pass manager (passes/pass.h,
// kLowering in passes/pass_manager.cpp): each rewrite is a function of the plan (it carries
// the per-node choices of the nodes it merges) returning one line per rewrite; its file
// registers it with
//   SAMPAN_REGISTER_TARGET_PASS("cuda", "<name>", (PlanRewritePass<Function>));
// (or PlanRewritePassCc<Function> for a rewrite that takes the device's compute capability).
#pragma once

#include <string>
#include <vector>

#include "passes/pass.h"
#include "plan/plan.h"

namespace sampan::cuda {

using PlanRewrite = Result<std::vector<std::string>> (*)(plan::Plan&);
using PlanRewriteCc = Result<std::vector<std::string>> (*)(plan::Plan&, int cc_major);

inline Result<plan::Plan*> LoweringPlan(ir::Graph& graph, passes::PassContext& ctx) {
  if (ctx.plan == nullptr || ctx.plan->graph.get() != &graph)
    return Internal("cuda lowering pass '", ctx.current_pass, "' run outside PassManager::RunLowering");
  return ctx.plan;
}

inline bool RecordAll(passes::PassContext& ctx, const std::vector<std::string>& done) {
  for (const std::string& line : done) ctx.Record(line);
  return !done.empty();
}

template <PlanRewrite F>
Result<bool> PlanRewritePass(ir::Graph& graph, passes::PassContext& ctx) {
  SP_ASSIGN_OR_RETURN(plan::Plan * plan, LoweringPlan(graph, ctx));
  SP_ASSIGN_OR_RETURN(std::vector<std::string> done, F(*plan));
  return RecordAll(ctx, done);
}

template <PlanRewriteCc F>
Result<bool> PlanRewritePassCc(ir::Graph& graph, passes::PassContext& ctx) {
  SP_ASSIGN_OR_RETURN(plan::Plan * plan, LoweringPlan(graph, ctx));
  SP_ASSIGN_OR_RETURN(std::vector<std::string> done, F(*plan, ctx.cc_major));
  return RecordAll(ctx, done);
}

}  // namespace sampan::cuda
