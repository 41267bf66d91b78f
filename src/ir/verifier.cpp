#include <optional>
#include <unordered_set>

#include "ir/graph.h"

namespace sampan::ir {

namespace {

// Checks one graph and, recursively, the subgraphs of its nodes; `where` prefixes problems
// found inside a subgraph ("Loop 'l' attribute 'body': ").
void VerifyGraph(const Graph& graph, const std::string& where, std::vector<std::string>& problems) {
  std::unordered_set<const Value*> available;
  for (const Value* in : graph.inputs()) available.insert(in);
  for (const Value* c : graph.captures()) {
    if (c->producer() != nullptr || c->is_constant() || available.count(c))
      problems.push_back(StrCat(where, "capture '", c->name(), "' is also an input, a constant or a node output"));
    available.insert(c);
  }
  for (const Value* v : graph.values()) {
    if (v->is_constant()) {
      available.insert(v);
      if (v->type.dtype != v->data.dtype() || !v->type.is_static() || v->type.static_shape() != v->data.shape())
        problems.push_back(StrCat(where, "constant '", v->name(), "' is declared ", v->type.ToString(), " but holds ",
                                  v->data.Describe()));
    }
  }
  for (const auto& node : graph.nodes()) {
    for (size_t i = 0; i < node->num_inputs(); ++i) {
      const Value* in = node->input(i);
      if (in == nullptr) continue;
      if (!available.count(in)) {
        if (in->producer() == nullptr)
          problems.push_back(StrCat(where, node->Label(), " input ", i, " '", in->name(),
                                    "' is not a graph input, a constant, or produced by any node"));
        else
          problems.push_back(StrCat(where, node->Label(), " input ", i, " '", in->name(), "' is used before ",
                                    in->producer()->Label(), " produces it"));
      }
    }
    for (const Value* out : node->outputs()) {
      if (out == nullptr) continue;
      if (out->producer() != node.get())
        problems.push_back(StrCat(where, node->Label(), " output '", out->name(), "' has another producer"));
      if (available.count(out))
        problems.push_back(
            StrCat(where, "value '", out->name(), "' is defined more than once (again by ", node->Label(), ")"));
      available.insert(out);
    }
    // Every subgraph binds the same trailing inputs, each of them present.
    std::optional<size_t> captures;
    for (const auto& [key, a] : node->attrs) {
      std::vector<const Graph*> subs;
      if (a.type == AttrType::kGraph) subs.push_back(a.g.get());
      for (const auto& g : a.graphs) subs.push_back(g.get());
      for (const Graph* g : subs) {
        const std::string inner = StrCat(where, node->Label(), " attribute '", key, "': ");
        if (g == nullptr) {
          problems.push_back(inner + "subgraph is missing");
          continue;
        }
        if (!captures) captures = g->captures().size();
        if (g->captures().size() != *captures)
          problems.push_back(StrCat(inner, "binds ", g->captures().size(),
                                    " enclosing values, another subgraph of the node ", *captures));
        VerifyGraph(*g, inner, problems);
      }
    }
    if (captures) {
      if (*captures > node->num_inputs()) {
        problems.push_back(StrCat(where, node->Label(), ": its subgraphs bind ", *captures,
                                  " enclosing values but the node has ", node->num_inputs(), " inputs"));
      } else {
        for (size_t i = node->num_inputs() - *captures; i < node->num_inputs(); ++i)
          if (node->input(i) == nullptr)
            problems.push_back(
                StrCat(where, node->Label(), " input ", i, " (an enclosing value its subgraphs read) is missing"));
      }
    }
  }
  for (const Value* out : graph.outputs())
    if (!available.count(out)) problems.push_back(StrCat(where, "graph output '", out->name(), "' is never produced"));
}

}  // namespace

Status Verify(const Graph& graph) {
  std::vector<std::string> problems;
  VerifyGraph(graph, "", problems);
  if (problems.empty()) return Status::Ok();
  std::string msg = StrCat("graph '", graph.name, "' is malformed (", problems.size(), " problem",
                           problems.size() > 1 ? "s" : "", "):");
  for (const auto& p : problems) msg += "\n  - " + p;
  return InvalidArgument(msg);
}

}  // namespace sampan::ir
