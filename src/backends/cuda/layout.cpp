#include "backends/cuda/layout.h"

#include <functional>
#include <unordered_map>
#include <vector>

#include "backends/cuda/node_kernel.h"

namespace sampan::cuda {
namespace {

bool HalfType(const ir::Value* v) {
  return v && (v->type.dtype == DType::kFloat16 || v->type.dtype == DType::kBFloat16);
}
bool Rank4(const ir::Value* v) {
  return v && v->type.has_rank() && v->type.dims->size() == 4;
}

bool IsConv(const ir::Node& n) {
  return (n.domain.empty() && n.op_type == "Conv") ||
         (n.domain == "sampan" && (n.op_type == "FusedConv" || n.op_type == "FusedConvPool"));
}

// Nodes whose kernels gain from channels-last storage (tensor-core convolutions,
// pooling, raw images): a region of channels-last values must hold one of them.
bool Anchors(const ir::Node& n) {
  if (IsConv(n)) return Rank4(n.input(0)) && HalfType(n.input(0)) && HalfType(n.output(0));
  if (n.domain == "sampan" && n.op_type == "ImageInput")
    return n.attr_string("layout", "NCHW") == "NCHW" && Rank4(n.output(0)) && HalfType(n.output(0));
  return false;
}

// What a node allows for its 4-D half-precision activations (the op table's answer,
// narrowed where the kernel needs more than the op: 2-D pooling without indices).
LayoutSupport Support(const ir::Node& n) {
  if (IsConv(n) && !(HalfType(n.input(0)) && HalfType(n.output(0)))) return LayoutSupport::kNone;
  if (n.domain.empty() && (n.op_type == "MaxPool" || n.op_type == "AveragePool") &&
      (n.num_outputs() != 1 || n.attr_int("storage_order", 0) != 0 || n.attr_ints("kernel_shape").size() != 2))
    return LayoutSupport::kNone;
  return ChannelsLastSupport(n);
}

}  // namespace

// The largest set of candidates (4-D half-precision activations that are neither graph
// inputs nor outputs) that every node accepts: kNone nodes drop the candidates they
// touch, kSame nodes keep theirs only all together; repeated to a fixed point. Then
// only regions (values joined through nodes) that touch an anchor stay channels-last,
// so a transformer's 4-D tensors are left alone.
std::unordered_set<const ir::Value*> ChannelsLastValues(const ir::Graph& graph) {
  std::unordered_set<const ir::Value*> set;
  std::unordered_set<const ir::Value*> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  for (const auto& np : graph.nodes())
    for (const ir::Value* v : np->outputs())
      if (v && Rank4(v) && HalfType(v) && !graph_outputs.count(v) && !v->uses().empty()) set.insert(v);
  // Every 4-D activation a node reads or writes, whatever its type: one that cannot be
  // channels-last (an f32 graph input feeding the FP16 Cast) pins a kSame node's output
  // to NCHW too.
  auto touched = [&](const ir::Node& n) {
    std::vector<const ir::Value*> vs;
    for (const ir::Value* v : n.inputs())
      if (v && Rank4(v) && !v->is_constant()) vs.push_back(v);
    for (const ir::Value* v : n.outputs())
      if (v && Rank4(v)) vs.push_back(v);
    return vs;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& np : graph.nodes()) {
      const ir::Node& n = *np;
      const auto vs = touched(n);
      if (vs.empty()) continue;
      const LayoutSupport s = Support(n);
      bool drop = s == LayoutSupport::kNone;
      if (s == LayoutSupport::kSame)
        for (const ir::Value* v : vs) drop = drop || !set.count(v);
      if (!drop) continue;
      for (const ir::Value* v : vs) changed = set.erase(v) > 0 || changed;
    }
  }
  // Regions: union-find over the values each node joins.
  std::unordered_map<const ir::Value*, const ir::Value*> parent;
  std::function<const ir::Value*(const ir::Value*)> find = [&](const ir::Value* v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return v;
    return it->second = find(it->second);
  };
  for (const ir::Value* v : set) parent[v] = v;
  for (const auto& np : graph.nodes()) {
    const ir::Value* first = nullptr;
    for (const ir::Value* v : touched(*np)) {
      if (!set.count(v)) continue;
      if (!first)
        first = v;
      else
        parent[find(v)] = find(first);
    }
  }
  std::unordered_set<const ir::Value*> anchored;
  for (const auto& np : graph.nodes()) {
    if (!Anchors(*np)) continue;
    for (const ir::Value* v : touched(*np))
      if (set.count(v)) anchored.insert(find(v));
  }
  std::unordered_set<const ir::Value*> out;
  for (const ir::Value* v : set)
    if (anchored.count(find(v))) out.insert(v);
  return out;
}

}  // namespace sampan::cuda
