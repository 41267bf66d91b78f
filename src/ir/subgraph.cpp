#include "ir/subgraph.h"

#include <map>
#include <set>
#include <vector>

namespace sampan::ir {

Status BindCaptures(Node* node, const std::function<Value*(const std::string&)>& resolve) {
  std::vector<Graph*> subs = node->subgraphs();
  if (subs.empty()) return Status::Ok();
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (Graph* sub : subs)
    for (const Value* c : sub->captures())
      if (seen.insert(c->name()).second) names.push_back(c->name());
  // Resolve first: a missing name leaves the node unchanged.
  std::vector<Value*> bound;
  for (const std::string& n : names) {
    Value* v = resolve(n);
    if (v == nullptr)
      return InvalidArgument(node->Label(), ": its subgraphs read '", n, "', which no enclosing graph defines");
    bound.push_back(v);
  }
  for (Graph* sub : subs) {
    std::map<std::string, Value*> by_name;
    for (Value* c : sub->captures()) by_name[c->name()] = c;
    std::vector<Value*> ordered;
    for (const std::string& n : names) {
      auto it = by_name.find(n);
      if (it != by_name.end()) {
        ordered.push_back(it->second);
        continue;
      }
      // Unread by this subgraph; the name may be taken by one of its own values.
      SP_ASSIGN_OR_RETURN(Value * placeholder, sub->AddValue(sub->FindValue(n) ? sub->FreshName(n) : n));
      ordered.push_back(placeholder);
    }
    sub->captures() = std::move(ordered);
  }
  const size_t first = node->num_inputs();
  for (size_t k = 0; k < bound.size(); ++k) node->SetInput(first + k, bound[k]);
  return Status::Ok();
}

}  // namespace sampan::ir
