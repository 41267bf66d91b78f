// Merges nodes that compute the same thing: same op, the same attributes and
// the same inputs, where small constants count as the same input when their
// contents are equal. Exported transformers recompute the attention-mask
// conversion (Cast, Sub, Mul, Where on the mask input) in every layer, each
// copy with its own scalar constants; this leaves one copy for all layers.
//
// Nodes are visited in topological order and a duplicate's outputs are pointed
// at the first copy's, so its readers are compared on the merged values and a
// chain of duplicates collapses in one run.
#include <cstring>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "ops/op.h"
#include "passes/pass.h"

namespace sampan::passes {
namespace {

// Constants up to this size are compared by content; larger ones (weights) only
// by identity, since equal weights in two places are rare and costly to compare.
constexpr int64_t kMaxContentComparedElements = 1024;

size_t HashCombine(size_t seed, size_t h) {
  return seed ^ (h + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2));
}

size_t HashBytes(const void* data, size_t n) {
  return std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(data), n));
}

// Equal dtype, shape and bytes. Types without a fixed element size (strings,
// 4-bit) never compare equal: their bytes are not their contents.
bool SameTensor(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || DTypeSize(a.dtype()) == 0) return false;
  return a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Floats by bit pattern: -0.0 and 0.0 may behave differently, and NaN equals itself.
bool SameFloats(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

bool SameAttribute(const ir::Attribute& a, const ir::Attribute& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case ir::AttrType::kFloat:
      return SameFloats(&a.f, &b.f, 1);
    case ir::AttrType::kInt:
      return a.i == b.i;
    case ir::AttrType::kString:
      return a.s == b.s;
    case ir::AttrType::kTensor:
      return SameTensor(a.t, b.t);
    case ir::AttrType::kFloats:
      return a.floats.size() == b.floats.size() && SameFloats(a.floats.data(), b.floats.data(), a.floats.size());
    case ir::AttrType::kInts:
      return a.ints == b.ints;
    case ir::AttrType::kStrings:
      return a.strings == b.strings;
    case ir::AttrType::kTensors:
      if (a.tensors.size() != b.tensors.size()) return false;
      for (size_t i = 0; i < a.tensors.size(); ++i)
        if (!SameTensor(a.tensors[i], b.tensors[i])) return false;
      return true;
    case ir::AttrType::kGraph:
    case ir::AttrType::kGraphs:
      return false;  // subgraphs are not compared (nodes with them are never merged)
  }
  return false;
}

// Whether merging two copies of `n` keeps the model's meaning: its results must
// be a function of its inputs and attributes alone.
bool Mergeable(const ir::Node& n) {
  if (n.num_outputs() == 0) return false;
  // Two random draws are independent; merged they would be the same draw.
  if (ops::IsNondeterministic(n)) return false;
  // A subgraph may draw random numbers or read outer values implicitly; not worth comparing.
  for (const auto& [key, attr] : n.attrs)
    if (attr.type == ir::AttrType::kGraph || attr.type == ir::AttrType::kGraphs) return false;
  return true;
}

// Maps each value to a representative: a small constant to the first constant
// seen with equal contents, every other value to itself.
class ValueClasses {
 public:
  explicit ValueClasses(const ir::Graph& graph) : inputs_(graph.inputs().begin(), graph.inputs().end()) {}

  const ir::Value* Representative(const ir::Value* v) {
    if (v == nullptr || !v->is_constant() || v->data.numel() > kMaxContentComparedElements || inputs_.count(v))
      return v;
    auto known = rep_.find(v);
    if (known != rep_.end()) return known->second;
    const Tensor& t = v->data;
    size_t h = HashCombine(std::hash<int>{}(static_cast<int>(t.dtype())),
                           HashBytes(t.shape().data(), t.shape().size() * sizeof(t.shape()[0])));
    if (DTypeSize(t.dtype()) != 0) h = HashCombine(h, HashBytes(t.raw(), t.nbytes()));
    const ir::Value* rep = v;
    std::vector<const ir::Value*>& same_hash = by_hash_[h];
    for (const ir::Value* c : same_hash)
      if (SameTensor(c->data, t)) {
        rep = c;
        break;
      }
    if (rep == v) same_hash.push_back(v);
    rep_[v] = rep;
    return rep;
  }

 private:
  std::unordered_set<const ir::Value*> inputs_;  // never merged: the caller feeds each its own data
  std::unordered_map<const ir::Value*, const ir::Value*> rep_;
  std::unordered_map<size_t, std::vector<const ir::Value*>> by_hash_;
};

size_t HashNode(const ir::Node& n, ValueClasses& values) {
  size_t h = HashCombine(std::hash<std::string>{}(n.domain), std::hash<std::string>{}(n.op_type));
  h = HashCombine(h, n.num_outputs());
  for (const ir::Value* in : n.inputs()) h = HashCombine(h, std::hash<const void*>{}(values.Representative(in)));
  for (const auto& [key, attr] : n.attrs) h = HashCombine(h, std::hash<std::string>{}(key));
  return h;
}

bool SameComputation(const ir::Node& a, const ir::Node& b, ValueClasses& values) {
  if (a.domain != b.domain || a.op_type != b.op_type || a.num_inputs() != b.num_inputs() ||
      a.num_outputs() != b.num_outputs() || a.attrs.size() != b.attrs.size())
    return false;
  for (size_t i = 0; i < a.num_inputs(); ++i)
    if (values.Representative(a.input(i)) != values.Representative(b.input(i))) return false;
  for (auto ia = a.attrs.begin(), ib = b.attrs.begin(); ia != a.attrs.end(); ++ia, ++ib)
    if (ia->first != ib->first || !SameAttribute(ia->second, ib->second)) return false;
  return true;
}

// Every output of `dup` that is read or is a graph output can be taken over by
// the same output of `keep` without changing the graph's interface.
bool CanMergeInto(const ir::Graph& graph, const ir::Node& dup, const ir::Node& keep) {
  for (size_t i = 0; i < dup.num_outputs(); ++i) {
    const ir::Value* out = dup.output(i);
    if (out == nullptr || (out->uses().empty() && !IsGraphOutput(graph, out))) continue;
    if (keep.output(i) == nullptr || !CanForward(graph, out, keep.output(i))) return false;
  }
  return true;
}

Result<bool> EliminateCommonSubexpressions(ir::Graph& graph, PassContext& ctx) {
  SP_RETURN_IF_ERROR(graph.TopologicalSort());
  std::vector<ir::Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  ValueClasses values(graph);
  std::unordered_map<size_t, std::vector<ir::Node*>> first_copies;
  bool changed = false;
  for (ir::Node* n : nodes) {
    if (!Mergeable(*n)) continue;
    std::vector<ir::Node*>& candidates = first_copies[HashNode(*n, values)];
    ir::Node* keep = nullptr;
    for (ir::Node* c : candidates)
      if (SameComputation(*c, *n, values)) {
        keep = c;
        break;
      }
    if (keep == nullptr) {
      candidates.push_back(n);
      continue;
    }
    // n stays when the interface needs it (both copies' results are graph outputs)
    // or it has a used output that keep omits; keep stays the copy later ones match.
    if (!CanMergeInto(graph, *n, *keep)) continue;
    ctx.Record(StrCat("merged ", n->Label(), " into identical ", keep->Label()));
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      ir::Value* out = n->output(i);
      if (out == nullptr || (out->uses().empty() && !IsGraphOutput(graph, out))) continue;
      SP_RETURN_IF_ERROR(ForwardValue(graph, out, keep->output(i)));
    }
    graph.RemoveNode(n);
    changed = true;
  }
  return changed;
}

}  // namespace

// After constant folding (folded subexpressions need no merging) and before the
// fusions, which then match one copy instead of many.
SAMPAN_REGISTER_PASS("common_subexpression", EliminateCommonSubexpressions);

}  // namespace sampan::passes
