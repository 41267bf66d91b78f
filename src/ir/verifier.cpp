#include <unordered_set>

#include "ir/graph.h"

namespace sampan::ir {

Status Verify(const Graph& graph) {
  std::vector<std::string> problems;
  std::unordered_set<const Value*> available;
  for (const Value* in : graph.inputs()) available.insert(in);
  for (const Value* v : graph.values()) {
    if (v->is_constant()) {
      available.insert(v);
      if (v->type.dtype != v->data.dtype() || !v->type.is_static() ||
          v->type.static_shape() != v->data.shape())
        problems.push_back(StrCat("constant '", v->name(), "' is declared ", v->type.ToString(),
                                  " but holds ", v->data.Describe()));
    }
  }
  for (const auto& node : graph.nodes()) {
    for (size_t i = 0; i < node->num_inputs(); ++i) {
      const Value* in = node->input(i);
      if (in == nullptr) continue;
      if (!available.count(in)) {
        if (in->producer() == nullptr)
          problems.push_back(StrCat(node->Label(), " input ", i, " '", in->name(),
                                    "' is not a graph input, a constant, or produced by any node"));
        else
          problems.push_back(StrCat(node->Label(), " input ", i, " '", in->name(),
                                    "' is used before ", in->producer()->Label(), " produces it"));
      }
    }
    for (const Value* out : node->outputs()) {
      if (out == nullptr) continue;
      if (out->producer() != node.get())
        problems.push_back(StrCat(node->Label(), " output '", out->name(), "' has another producer"));
      if (available.count(out))
        problems.push_back(StrCat("value '", out->name(), "' is defined more than once (again by ",
                                  node->Label(), ")"));
      available.insert(out);
    }
  }
  for (const Value* out : graph.outputs())
    if (!available.count(out))
      problems.push_back(StrCat("graph output '", out->name(), "' is never produced"));
  if (problems.empty()) return Status::Ok();
  std::string msg = StrCat("graph '", graph.name, "' is malformed (", problems.size(), " problem",
                           problems.size() > 1 ? "s" : "", "):");
  for (const auto& p : problems) msg += "\n  - " + p;
  return InvalidArgument(msg);
}

}  // namespace sampan::ir
