#include "backends/cpu/lowering_rewrite.h"

#include "passes/fusion_util.h"

namespace sampan::cpu {

Result<std::vector<std::string>> RewriteUntilNoneMatches(plan::Plan& plan, NodeRewrite at) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  bool changed = true;
  while (changed) {
    changed = false;
    for (const auto& np : g.nodes()) {
      std::string line;
      SP_ASSIGN_OR_RETURN(changed, at(g, np.get(), &line));
      if (changed) {
        done.push_back(std::move(line));
        break;  // the node list changed
      }
    }
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

}  // namespace sampan::cpu
