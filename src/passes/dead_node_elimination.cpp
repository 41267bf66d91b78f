// Removes nodes none of whose outputs is read or is a graph output.
#include "passes/pass.h"

namespace sampan::passes {
namespace {

Result<bool> EliminateDeadNodes(ir::Graph& graph, PassContext& ctx) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    // Walk backwards so a chain of dead nodes goes in one sweep.
    for (size_t i = graph.nodes().size(); i-- > 0;) {
      ir::Node* node = graph.nodes()[i].get();
      bool live = false;
      for (const ir::Value* out : node->outputs())
        if (out && (!out->uses().empty() || IsGraphOutput(graph, out))) live = true;
      if (live) continue;
      ctx.Record(StrCat("removed unused ", node->Label()));
      graph.RemoveNode(node);
      changed = again = true;
    }
  }
  return changed;
}

}  // namespace

SAMPAN_REGISTER_PASS("dead_node_elimination", EliminateDeadNodes);

}  // namespace sampan::passes
