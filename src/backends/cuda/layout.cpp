#include "backends/cuda/layout.h"

namespace sampan::cuda {
namespace {

bool HalfType(const ir::Value* v) {
  return v && (v->type.dtype == DType::kFloat16 || v->type.dtype == DType::kBFloat16);
}
bool Rank4(const ir::Value* v) { return v && v->type.has_rank() && v->type.dims->size() == 4; }

bool IsConv(const ir::Node& n) {
  const bool conv = (n.domain.empty() && n.op_type == "Conv") || (n.domain == "sampan" && n.op_type == "FusedConv");
  return conv && n.attr_int("group", 1) == 1 && Rank4(n.input(0)) && HalfType(n.input(0)) && HalfType(n.output(0));
}
bool IsPool2d(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "MaxPool" || n.op_type == "AveragePool") && n.num_outputs() == 1 &&
         n.attr_int("storage_order", 0) == 0 && n.attr_ints("kernel_shape").size() == 2 && Rank4(n.input(0)) &&
         HalfType(n.input(0));
}
bool IsGlobalPool(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool") &&
         Rank4(n.input(0)) && HalfType(n.input(0));
}

// Can write output 0 channels-last.
bool WritesNhwc(const ir::Node& n) {
  if (IsConv(n) || IsPool2d(n)) return true;
  return n.domain == "sampan" && n.op_type == "ImageInput" && n.attr_string("layout", "NCHW") == "NCHW" &&
         Rank4(n.output(0)) && HalfType(n.output(0));
}

// Reads input `slot` channels-last.
bool ReadsNhwc(const ir::Node& n, int slot) {
  if (IsConv(n)) return slot == 0 || slot == 3;
  return (IsPool2d(n) || IsGlobalPool(n)) && slot == 0;
}

}  // namespace

std::unordered_set<const ir::Value*> ChannelsLastValues(const ir::Graph& graph) {
  std::unordered_set<const ir::Value*> out;
  std::unordered_set<const ir::Value*> graph_outputs(graph.outputs().begin(), graph.outputs().end());
  for (const auto& np : graph.nodes()) {
    const ir::Node& n = *np;
    if (n.num_outputs() < 1 || !n.output(0) || !WritesNhwc(n)) continue;
    const ir::Value* v = n.output(0);
    if (graph_outputs.count(v) || v->uses().empty()) continue;
    bool all = true;
    for (const auto& [user, slot] : v->uses()) all = all && ReadsNhwc(*user, slot);
    if (all) out.insert(v);
  }
  return out;
}

}  // namespace sampan::cuda
