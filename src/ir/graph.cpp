#include "ir/graph.h"

#include <algorithm>
#include <unordered_set>

namespace sampan::ir {

bool TensorType::is_static() const {
  if (!dims) return false;
  return std::all_of(dims->begin(), dims->end(), [](const Dim& d) { return d.known(); });
}

Shape TensorType::static_shape() const {
  Shape s;
  if (dims)
    for (const Dim& d : *dims) s.push_back(d.value);
  return s;
}

TensorType TensorType::Static(DType dtype, const Shape& shape) {
  TensorType t;
  t.dtype = dtype;
  t.dims = Dims{};
  for (int64_t d : shape) t.dims->push_back(Dim::Known(d));
  return t;
}

std::string TensorType::ToString() const {
  std::string s = DTypeName(dtype);
  if (!dims) return s + "[*]";
  s += "[";
  for (size_t i = 0; i < dims->size(); ++i) {
    if (i) s += ",";
    const Dim& d = (*dims)[i];
    s += d.known() ? std::to_string(d.value) : (d.param.empty() ? "?" : d.param);
  }
  return s + "]";
}

const char* AttrTypeName(AttrType t) {
  switch (t) {
    case AttrType::kFloat:
      return "float";
    case AttrType::kInt:
      return "int";
    case AttrType::kString:
      return "string";
    case AttrType::kTensor:
      return "tensor";
    case AttrType::kGraph:
      return "graph";
    case AttrType::kFloats:
      return "floats";
    case AttrType::kInts:
      return "ints";
    case AttrType::kStrings:
      return "strings";
    case AttrType::kTensors:
      return "tensors";
    case AttrType::kGraphs:
      return "graphs";
  }
  return "?";
}

// ---- Node -------------------------------------------------------------------

void Node::SetInput(size_t i, Value* v) {
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  if (Value* old = inputs_[i]) {
    auto& u = old->uses_;
    auto it = std::find(u.begin(), u.end(), std::make_pair(this, static_cast<int>(i)));
    if (it != u.end()) u.erase(it);
  }
  inputs_[i] = v;
  if (v) v->uses_.emplace_back(this, static_cast<int>(i));
}

const Attribute* Node::attr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::attr_int(const std::string& key, int64_t dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == AttrType::kInt ? a->i : dflt;
}

float Node::attr_float(const std::string& key, float dflt) const {
  const Attribute* a = attr(key);
  if (!a) return dflt;
  if (a->type == AttrType::kFloat) return a->f;
  if (a->type == AttrType::kInt) return static_cast<float>(a->i);
  return dflt;
}

std::string Node::attr_string(const std::string& key, const std::string& dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == AttrType::kString ? a->s : dflt;
}

std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == AttrType::kInts ? a->ints : dflt;
}

std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> dflt) const {
  const Attribute* a = attr(key);
  return a && a->type == AttrType::kFloats ? a->floats : dflt;
}

std::string Node::Label() const {
  return StrCat(op_type, " '", name, "'");
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& [key, a] : attrs) {
    if (a.type == AttrType::kGraph && a.g) out.push_back(a.g.get());
    if (a.type == AttrType::kGraphs)
      for (const auto& g : a.graphs)
        if (g) out.push_back(g.get());
  }
  return out;
}

Graph* Node::subgraph(const std::string& key) const {
  const Attribute* a = attr(key);
  return a && a->type == AttrType::kGraph ? a->g.get() : nullptr;
}

size_t Node::num_captures() const {
  for (const auto& [key, a] : attrs) {
    if (a.type == AttrType::kGraph && a.g) return std::min(a.g->captures().size(), inputs_.size());
    if (a.type == AttrType::kGraphs && !a.graphs.empty() && a.graphs[0])
      return std::min(a.graphs[0]->captures().size(), inputs_.size());
  }
  return 0;
}

Result<int64_t> Node::required_int(const std::string& key) const {
  const Attribute* a = attr(key);
  if (!a) return InvalidArgument(Label(), ": missing required attribute '", key, "'");
  if (a->type != AttrType::kInt)
    return InvalidArgument(Label(), ": attribute '", key, "' must be int, got ", AttrTypeName(a->type));
  return a->i;
}

Result<float> Node::required_float(const std::string& key) const {
  const Attribute* a = attr(key);
  if (!a) return InvalidArgument(Label(), ": missing required attribute '", key, "'");
  if (a->type != AttrType::kFloat)
    return InvalidArgument(Label(), ": attribute '", key, "' must be float, got ", AttrTypeName(a->type));
  return a->f;
}

Result<std::vector<int64_t>> Node::required_ints(const std::string& key) const {
  const Attribute* a = attr(key);
  if (!a) return InvalidArgument(Label(), ": missing required attribute '", key, "'");
  if (a->type != AttrType::kInts)
    return InvalidArgument(Label(), ": attribute '", key, "' must be ints, got ", AttrTypeName(a->type));
  return a->ints;
}

// ---- Graph ------------------------------------------------------------------

int64_t Graph::opset() const {
  auto it = opsets.find("");
  if (it != opsets.end()) return it->second;
  it = opsets.find("ai.onnx");
  return it == opsets.end() ? 0 : it->second;
}

std::string Graph::FreshName(const std::string& hint) {
  std::string base = hint.empty() ? "v" : hint;
  if (!by_name_.count(base)) return base;
  for (;;) {
    std::string candidate = StrCat(base, "_", ++fresh_counter_);
    if (!by_name_.count(candidate)) return candidate;
  }
}

Result<Value*> Graph::AddValue(const std::string& name, TensorType type) {
  std::string n = name.empty() ? FreshName("v") : name;
  if (by_name_.count(n)) return InvalidArgument("value name '", n, "' is defined more than once");
  auto v = std::make_unique<Value>();
  v->name_ = n;
  v->type = std::move(type);
  Value* raw = v.get();
  values_.push_back(std::move(v));
  by_name_[n] = raw;
  return raw;
}

Result<Value*> Graph::AddConstant(const std::string& name, Tensor data) {
  SP_ASSIGN_OR_RETURN(Value * v, AddValue(name, TensorType::Static(data.dtype(), data.shape())));
  v->data = std::move(data);
  return v;
}

Result<Value*> Graph::AddCapture(const std::string& name, TensorType type) {
  SP_ASSIGN_OR_RETURN(Value * v, AddValue(name, std::move(type)));
  captures_.push_back(v);
  return v;
}

bool Graph::is_capture(const Value* v) const {
  return std::find(captures_.begin(), captures_.end(), v) != captures_.end();
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Result<Node*> Graph::AddNode(const std::string& op_type, const std::vector<Value*>& inputs,
                             const std::vector<Value*>& outputs, const std::string& name) {
  for (Value* o : outputs) {
    if (o == nullptr) continue;
    if (o->producer_ != nullptr)
      return InvalidArgument("value '", o->name(), "' is produced by both ", o->producer_->Label(), " and ", op_type,
                             " '", name, "'");
  }
  auto node = std::make_unique<Node>();
  node->op_type = op_type;
  node->name = name;
  Node* raw = node.get();
  for (size_t i = 0; i < inputs.size(); ++i) raw->SetInput(i, inputs[i]);
  raw->inputs_.resize(inputs.size());
  raw->outputs_ = outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] == nullptr) continue;
    outputs[i]->producer_ = raw;
    outputs[i]->producer_output_ = static_cast<int>(i);
  }
  nodes_.push_back(std::move(node));
  return raw;
}

void Graph::RemoveNode(Node* node) {
  for (size_t i = 0; i < node->inputs_.size(); ++i) node->SetInput(i, nullptr);
  for (Value* o : node->outputs_) {
    if (o && o->producer_ == node) {
      o->producer_ = nullptr;
      o->producer_output_ = -1;
    }
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.get() == node; });
  if (it != nodes_.end()) nodes_.erase(it);
}

void Graph::ReplaceAllUsesWith(Value* from, Value* to) {
  auto uses = from->uses_;
  for (auto& [node, idx] : uses) node->SetInput(static_cast<size_t>(idx), to);
  for (Value*& o : outputs_)
    if (o == from) o = to;
}

Status Graph::RenameValue(Value* v, const std::string& new_name) {
  if (v->name_ == new_name) return Status::Ok();
  if (by_name_.count(new_name)) return InvalidArgument("value name '", new_name, "' is already taken");
  by_name_.erase(v->name_);
  v->name_ = new_name;
  by_name_[new_name] = v;
  return Status::Ok();
}

void Graph::RemoveUnusedValues() {
  std::unordered_set<Value*> keep(inputs_.begin(), inputs_.end());
  keep.insert(outputs_.begin(), outputs_.end());
  keep.insert(captures_.begin(), captures_.end());
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : values_) {
    if (keep.count(v.get()) || v->producer_ || !v->uses_.empty()) {
      kept.push_back(std::move(v));
    } else {
      by_name_.erase(v->name_);
    }
  }
  values_ = std::move(kept);
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> out;
  out.reserve(values_.size());
  for (const auto& v : values_) out.push_back(v.get());
  return out;
}

Status Graph::TopologicalSort() {
  // Kahn's algorithm, stable with respect to the current order.
  std::unordered_map<const Node*, size_t> pending;
  for (const auto& n : nodes_) {
    size_t count = 0;
    for (Value* in : n->inputs_)
      if (in && in->producer_) ++count;
    pending[n.get()] = count;
  }
  std::vector<std::unique_ptr<Node>> sorted;
  std::vector<std::unique_ptr<Node>> rest = std::move(nodes_);
  bool progress = true;
  while (!rest.empty() && progress) {
    progress = false;
    std::vector<std::unique_ptr<Node>> next;
    for (auto& n : rest) {
      if (pending[n.get()] == 0) {
        for (Value* o : n->outputs_)
          if (o)
            for (auto& [user, idx] : o->uses_) --pending[user];
        sorted.push_back(std::move(n));
        progress = true;
      } else {
        next.push_back(std::move(n));
      }
    }
    rest = std::move(next);
  }
  if (!rest.empty()) {
    std::string label = rest.front()->Label();
    for (auto& n : rest) sorted.push_back(std::move(n));
    nodes_ = std::move(sorted);
    return InvalidArgument("graph has a cycle through ", label);
  }
  nodes_ = std::move(sorted);
  return Status::Ok();
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto copy = std::make_unique<Graph>();
  copy->name = name;
  copy->opsets = opsets;
  copy->fresh_counter_ = fresh_counter_;
  std::unordered_map<const Value*, Value*> map;
  for (const auto& v : values_) {
    auto nv = std::make_unique<Value>();
    nv->name_ = v->name_;
    nv->type = v->type;
    nv->data = v->data;
    map[v.get()] = nv.get();
    copy->by_name_[nv->name_] = nv.get();
    copy->values_.push_back(std::move(nv));
  }
  auto mapped = [&](Value* v) { return v ? map.at(v) : nullptr; };
  for (const auto& n : nodes_) {
    auto nn = std::make_unique<Node>();
    nn->name = n->name;
    nn->op_type = n->op_type;
    nn->domain = n->domain;
    nn->attrs = n->attrs;
    for (auto& [key, a] : nn->attrs) {
      if (a.type == AttrType::kGraph && a.g) a.g = a.g->Clone();
      for (auto& g : a.graphs)
        if (g) g = g->Clone();
    }
    Node* raw = nn.get();
    for (size_t i = 0; i < n->inputs_.size(); ++i) raw->SetInput(i, mapped(n->inputs_[i]));
    raw->inputs_.resize(n->inputs_.size());
    for (size_t i = 0; i < n->outputs_.size(); ++i) {
      Value* o = mapped(n->outputs_[i]);
      raw->outputs_.push_back(o);
      if (o) {
        o->producer_ = raw;
        o->producer_output_ = static_cast<int>(i);
      }
    }
    copy->nodes_.push_back(std::move(nn));
  }
  for (Value* v : inputs_) copy->inputs_.push_back(mapped(v));
  for (Value* v : outputs_) copy->outputs_.push_back(mapped(v));
  for (Value* v : captures_) copy->captures_.push_back(mapped(v));
  return copy;
}

void Graph::ForEachSubgraph(const std::function<void(Graph&)>& fn) const {
  for (const auto& n : nodes_)
    for (Graph* g : n->subgraphs()) {
      fn(*g);
      g->ForEachSubgraph(fn);
    }
}

}  // namespace sampan::ir
