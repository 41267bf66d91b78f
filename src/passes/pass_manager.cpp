#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "ops/control_flow.h"
#include "ops/run_node.h"
#include "passes/pass.h"

namespace sampan::passes {

namespace {
std::map<std::string, PassDef>& Registry() {
  static std::map<std::string, PassDef> registry;
  return registry;
}

// The pipeline: every pass, in the order it runs. This list is the one place the order is
// written (DuckDB's optimizer.cpp is the model); each file only registers its name.
constexpr const char* kPipeline[] = {
    // Clean-up first, so the pattern passes see the smallest graph.
    "dead_node_elimination",
    "eliminate_noops",
    "constant_folding",
    "common_subexpression",
    // Folding into convolutions, before anything fuses them.
    "fold_batchnorm",
    "fold_conv_affine",
    // Recognising exported sub-graphs as the ops they spell.
    "recognize_layernorm",
    "recognize_gelu",
    "recognize_hardswish",
    // Fusions: bias into MatMul before attention is matched (its Q/K/V products carry the
    // bias), attention before its transposes are folded, and activations last, so they
    // join whatever product (conv + residual, Gemm) the earlier fusions left.
    "fuse_matmul_add",
    "fuse_attention",
    "fold_attention_transposes",
    "fuse_conv_residual",
    "fuse_activation",
    // Q/DQ around the products (now with their epilogues) -> integer kernels.
    "fuse_quantized",
};

// Each backend's lowering rewrites, in the order its builder runs them (after the pipeline
// and quantization, before kernels are chosen). Passes of a backend that is not linked into
// this program are absent (none of them registered).
struct LoweringEntry {
  const char* target;
  const char* name;
};
constexpr LoweringEntry kLowering[] = {
    // LayerNorm takes the residual Add before anything packs the products that feed it.
    {"cuda", "fuse_add_layer_norm"},
    // One GEMM for the Q/K/V projections of an attention (then one FP8 GEMM in FP8 plans).
    {"cuda", "fuse_qkv"},
    // FP8 plans: LayerNorm and attention write their float8 copies themselves.
    {"cuda", "fuse_norm_quantize"},
    // Attention reads Q/K/V and writes its result through strided views (no head transposes).
    {"cuda", "fold_attention_views"},
    {"cuda", "fuse_attention_quantize"},
    // Normalisation + activation, the stem's conv + max-pool, GEMM + residual.
    {"cuda", "fuse_norm_activation"},
    {"cuda", "fuse_conv_pool"},
    {"cuda", "fuse_gemm_residual"},
};

[[noreturn]] void PipelineBug(const std::string& what) {
  std::fprintf(stderr, "sampan: pass pipeline: %s (src/passes/pass_manager.cpp kPipeline)\n", what.c_str());
  std::abort();
}

// Drops the captures no subgraph of `node` reads any more (a pass removed their readers): the
// node is rebuilt without those trailing inputs, so the enclosing value can die (or its
// producer be removed) like any value without readers.
Result<bool> PruneCaptures(ir::Graph& graph, ir::Node* node) {
  const size_t n = node->num_captures(), first = node->num_explicit_inputs();
  if (n == 0) return false;
  const std::vector<ir::Graph*> subs = node->subgraphs();
  std::vector<bool> read(n, false);
  for (ir::Graph* sub : subs)
    for (size_t k = 0; k < n && k < sub->captures().size(); ++k)
      read[k] = read[k] || !sub->captures()[k]->uses().empty() || IsGraphOutput(*sub, sub->captures()[k]);
  if (std::all_of(read.begin(), read.end(), [](bool r) { return r; })) return false;
  std::vector<ir::Value*> inputs(node->inputs().begin(), node->inputs().begin() + static_cast<std::ptrdiff_t>(first));
  for (size_t k = 0; k < n; ++k)
    if (read[k]) inputs.push_back(node->input(first + k));
  for (ir::Graph* sub : subs) {
    std::vector<ir::Value*> kept;
    for (size_t k = 0; k < n && k < sub->captures().size(); ++k)
      if (read[k]) kept.push_back(sub->captures()[k]);
    sub->captures() = std::move(kept);
    sub->RemoveUnusedValues();
  }
  const std::string name = node->name, op_type = node->op_type, domain = node->domain;
  std::map<std::string, ir::Attribute> attrs = node->attrs;
  const std::vector<ir::Value*> outputs = node->outputs();
  graph.RemoveNode(node);
  SP_ASSIGN_OR_RETURN(ir::Node * rebuilt, graph.AddNode(op_type, inputs, outputs, name));
  rebuilt->domain = domain;
  rebuilt->attrs = std::move(attrs);
  return true;
}

// Runs `pass` inside every subgraph of `graph`, bottom-up (a subgraph's own subgraphs first),
// each as a graph of its own: what it reads from enclosing graphs arrives through captures,
// which a pass sees as inputs, and its outputs are its interface, so nothing is rewritten
// across a subgraph's boundary. Captures left unread are then dropped, before the pass runs
// on `graph` itself (dead-node elimination there then sees producers nothing reads any more).
Result<bool> RunInsideSubgraphs(const PassDef& pass, ir::Graph& graph, PassContext& ctx) {
  std::vector<ir::Node*> owners;
  for (const auto& node : graph.nodes())
    if (!node->subgraphs().empty()) owners.push_back(node.get());
  bool changed = false;
  for (ir::Node* node : owners) {
    for (ir::Graph* sub : node->subgraphs()) {
      const std::string where = StrCat(node->Label(), " subgraph '", sub->name, "'");
      Result<bool> inner = RunInsideSubgraphs(pass, *sub, ctx);
      if (!inner.ok()) return inner.status().WithContext(where);
      Result<bool> c = pass.run(*sub, ctx);
      if (!c.ok()) return c.status().WithContext(where);
      if (*c || *inner) {
        sub->RemoveUnusedValues();
        Status st = sub->TopologicalSort();
        if (!st.ok()) return st.WithContext(where);
        changed = true;
      }
    }
    SP_ASSIGN_OR_RETURN(bool pruned, PruneCaptures(graph, node));
    changed |= pruned;
  }
  if (changed) SP_RETURN_IF_ERROR(graph.TopologicalSort());
  return changed;
}
}  // namespace

bool RegisterPass(PassDef def) {
  std::string name = def.name;
  if (!Registry().emplace(name, std::move(def)).second) PipelineBug(StrCat("pass '", name, "' is registered twice"));
  return true;
}

namespace {
// Checks the two lists against the registry once; aborts on a disagreement.
void CheckLists() {
  static const bool checked = [] {
    std::vector<const PassDef*> listed;
    auto list = [&](const char* name, const char* target) {
      const PassDef* p = FindPass(name);
      if (!p) PipelineBug(StrCat("'", name, "' is listed but no file registers it"));
      if (p->target != target)
        PipelineBug(StrCat("'", name, "' is registered for target '", p->target, "' but listed for '", target, "'"));
      if (std::find(listed.begin(), listed.end(), p) != listed.end())
        PipelineBug(StrCat("'", name, "' is listed twice"));
      listed.push_back(p);
    };
    for (const char* name : kPipeline) list(name, "");
    for (const LoweringEntry& e : kLowering) {
      // A backend not linked into this program registers none of its passes.
      const bool linked = std::any_of(Registry().begin(), Registry().end(),
                                      [&](const auto& kv) { return kv.second.target == e.target; });
      if (linked) list(e.name, e.target);
    }
    for (const auto& [name, def] : Registry())
      if (std::find(listed.begin(), listed.end(), &def) == listed.end())
        PipelineBug(StrCat("pass '", name, "' is registered but not listed, so it would never run"));
    return true;
  }();
  (void)checked;
}
}  // namespace

std::vector<const PassDef*> AllPasses() {
  CheckLists();
  std::vector<const PassDef*> out;
  for (const char* name : kPipeline) out.push_back(FindPass(name));
  return out;
}

std::vector<const PassDef*> LoweringPasses(const std::string& target) {
  CheckLists();
  std::vector<const PassDef*> out;
  for (const LoweringEntry& e : kLowering)
    if (e.target == target)
      if (const PassDef* p = FindPass(e.name)) out.push_back(p);
  return out;
}

const PassDef* FindPass(const std::string& name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

Status PassManager::Validate() const {
  for (const auto& name : options_.disabled) {
    if (FindPass(name)) continue;
    if (std::any_of(options_.extra_passes.begin(), options_.extra_passes.end(),
                    [&](const PassDef& p) { return p.name == name; }))
      continue;
    std::string valid;
    for (const PassDef* p : AllPasses()) valid += (valid.empty() ? "" : ", ") + p->name;
    for (const LoweringEntry& e : kLowering)
      if (FindPass(e.name)) valid += StrCat(", ", e.name);
    return InvalidArgument("--disable-pass '", name, "': no such pass (passes: ", valid, ")");
  }
  return Status::Ok();
}

Status PassManager::Run(ir::Graph& graph) {
  SP_RETURN_IF_ERROR(Validate());
  ctx_.integer_products = options_.integer_products;
  ctx_.fp8_products = options_.fp8_products;
  ctx_.disabled = std::set<std::string>(options_.disabled.begin(), options_.disabled.end());
  std::vector<const PassDef*> passes = AllPasses();
  for (const PassDef& extra : options_.extra_passes) passes.push_back(&extra);
  return RunPasses(passes, graph, true);
}

Status PassManager::RunLowering(ir::Graph& graph, plan::Plan* plan, const std::string& target, int cc_major) {
  SP_RETURN_IF_ERROR(Validate());
  ctx_.integer_products = options_.integer_products;
  ctx_.fp8_products = options_.fp8_products;
  ctx_.disabled = std::set<std::string>(options_.disabled.begin(), options_.disabled.end());
  ctx_.plan = plan;
  ctx_.cc_major = cc_major;
  Status st = RunPasses(LoweringPasses(target), graph, false);
  ctx_.plan = nullptr;
  return st;
}

Status PassManager::RunPasses(const std::vector<const PassDef*>& passes, ir::Graph& graph, bool inside_subgraphs) {
  for (const PassDef* pass : passes) {
    PassStats s;
    s.name = pass->name;
    s.nodes_before = graph.nodes().size();
    if (options_.disabled.count(pass->name)) {
      s.enabled = false;
      s.nodes_after = s.nodes_before;
      stats_.push_back(s);
      continue;
    }
    ctx_.current_pass = pass->name;
    auto t0 = std::chrono::steady_clock::now();
    Result<bool> inner = inside_subgraphs ? RunInsideSubgraphs(*pass, graph, ctx_) : Result<bool>(false);
    if (!inner.ok()) return inner.status().WithContext(StrCat("pass '", pass->name, "'"));
    Result<bool> changed = pass->run(graph, ctx_);
    if (!changed.ok()) return changed.status().WithContext(StrCat("pass '", pass->name, "'"));
    s.changed = *changed || *inner;
    if (s.changed) graph.RemoveUnusedValues();
    if (options_.verify && s.changed) {
      Status st = graph.TopologicalSort();
      if (st.ok()) st = ir::Verify(graph);
      if (st.ok()) st = ops::InferTypes(graph);
      if (!st.ok()) return st.WithContext(StrCat("graph is invalid after pass '", pass->name, "'"));
      ops::AnnotateSubgraphTypes(graph);
    }
    s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.nodes_after = graph.nodes().size();
    stats_.push_back(s);
    if (options_.after_pass) options_.after_pass(pass->name, graph);
  }
  return Status::Ok();
}

bool IsGraphOutput(const ir::Graph& graph, const ir::Value* v) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), v) != graph.outputs().end();
}

bool HasSingleUse(const ir::Graph& graph, const ir::Value* v) {
  return v->uses().size() == 1 && !IsGraphOutput(graph, v);
}

Status ReplaceWithConstants(ir::Graph& graph, ir::Node* node, const std::vector<Tensor>& values) {
  std::vector<ir::Value*> outs = node->outputs();
  graph.RemoveNode(node);
  for (size_t i = 0; i < outs.size(); ++i) {
    ir::Value* out = outs[i];
    if (out == nullptr) continue;
    out->data = values.at(i);
    out->type = ir::TensorType::Static(values[i].dtype(), values[i].shape());
  }
  return Status::Ok();
}

bool CanForward(const ir::Graph& graph, const ir::Value* from, const ir::Value* to) {
  if (!IsGraphOutput(graph, from)) return true;
  const bool to_is_input =
      std::find(graph.inputs().begin(), graph.inputs().end(), to) != graph.inputs().end() || graph.is_capture(to);
  return !to_is_input && !IsGraphOutput(graph, to) && !to->is_constant();
}

Status ForwardValue(ir::Graph& graph, ir::Value* from, ir::Value* to) {
  if (!CanForward(graph, from, to))
    return Internal("cannot forward graph output '", from->name(), "' to '", to->name(), "'");
  const bool was_output = IsGraphOutput(graph, from);
  graph.ReplaceAllUsesWith(from, to);
  if (was_output) {
    std::string name = from->name();
    SP_RETURN_IF_ERROR(graph.RenameValue(from, graph.FreshName(name + "_replaced")));
    SP_RETURN_IF_ERROR(graph.RenameValue(to, name));
  }
  return Status::Ok();
}

}  // namespace sampan::passes
