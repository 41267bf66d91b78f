#include "backends/cuda/capability.h"

#include <map>
#include <unordered_set>

#include "backends/cuda/layout.h"
#include "backends/cuda/node_kernel.h"
#include "runtime/plan_walk.h"

namespace sampan::cuda {
namespace {

using Where = NodeSupport::Where;

// The runtime's planning walk (runtime/plan_walk.h) with a lowering that only asks the
// kernel factories (check_only). `nhwc` is the channels-last plan; a host or folded node
// touching one of those values is named in nhwc_blocker (the runtime then plans NCHW).
Result<Capability> Walk(const ir::Graph& g, const std::unordered_set<const ir::Value*>& nhwc) {
  Capability cap;
  cap.channels_last_values = nhwc.size();
  auto touches_nhwc = [&](const ir::Node& n) {
    for (const ir::Value* v : n.inputs())
      if (v && nhwc.count(v)) return true;
    for (const ir::Value* v : n.outputs())
      if (v && nhwc.count(v)) return true;
    return false;
  };
  auto all_on_host = [&](const std::string& why) {
    for (const auto& np : g.nodes()) {
      NodeSupport& ns = cap.nodes[np->name];
      if (ns.where == Where::kFolded) continue;
      ns.where = Where::kHost;
      ns.family = "host";
      if (ns.reason.empty()) ns.reason = why;
    }
  };
  std::map<std::string, runtime::ConcreteType> types;
  for (const ir::Value* in : g.inputs()) {
    if (!in->type.is_static()) {
      all_on_host(StrCat("an input shape is not known before run time (graph input '", in->name(), "' is ",
                         in->type.ToString(), ")"));
      return cap;
    }
    types[in->name()] = runtime::ConcreteType{in->type.dtype, in->type.static_shape()};
  }
  const RunEnv env{};
  auto lower = [&](const runtime::LowerRequest& r) -> Status {
    const ir::Node& node = r.node;
    std::vector<KernelInput> kin(node.num_inputs());
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (const runtime::PlanValue* v = r.inputs[i]) kin[i] = KernelInput{true, v->dtype, v->shape, v->known};
    std::vector<KernelOutput> kout(node.num_outputs());
    for (size_t k = 0; k < r.outputs.size(); ++k)
      if (const runtime::PlanValue* v = r.outputs[k]) kout[k] = KernelOutput{v->dtype, v->shape};
    KernelOptions opt;
    opt.check_only = true;
    for (const ir::Value* v : node.inputs()) opt.in_nhwc.push_back(v && nhwc.count(v));
    opt.out_nhwc = node.num_outputs() > 0 && node.output(0) && nhwc.count(node.output(0));
    auto choice = MakeKernel(node, r.opset, kin, kout, opt, env);
    if (!choice.ok()) return choice.status();  // kUnsupported: the walk records the reason
    NodeSupport& ns = cap.nodes[node.name];
    ns.where = choice->view ? Where::kView : Where::kDevice;
    ns.family = choice->view ? "view" : StaticKernelFamily(node);
    return Status::Ok();
  };
  auto host = [](const runtime::LowerRequest&) { return Status::Ok(); };
  SP_ASSIGN_OR_RETURN(runtime::PlanWalk walk, runtime::WalkPlan(g, types, lower, host));
  for (const runtime::WalkedNode& wn : walk.nodes) {
    if (wn.fate == runtime::NodeFate::kLowered) continue;
    NodeSupport& ns = cap.nodes[wn.node->name];
    const bool folded = wn.fate == runtime::NodeFate::kFolded;
    ns.where = folded ? Where::kFolded : Where::kHost;
    ns.family = folded ? "folded" : "host";
    if (!folded) ns.reason = wn.reason;
    if (touches_nhwc(*wn.node) && cap.nhwc_blocker.empty()) cap.nhwc_blocker = wn.node->Label();
  }
  // The runtime cannot plan device memory past a data-dependent shape: the whole graph runs on the host.
  if (walk.dynamic) all_on_host(StrCat("the graph runs on the host: ", walk.dynamic_reason));
  return cap;
}

}  // namespace

Result<Capability> QueryCapability(const ir::Graph& graph) {
  // As the runtime plans: channels-last first; a host node touching a channels-last
  // value sends the whole graph back to NCHW (context.cpp, CudaContext::Plan).
  SP_ASSIGN_OR_RETURN(Capability cap, Walk(graph, ChannelsLastValues(graph)));
  if (cap.nhwc_blocker.empty()) return cap;
  const std::string blocker = cap.nhwc_blocker;
  SP_ASSIGN_OR_RETURN(Capability nchw, Walk(graph, {}));
  nchw.nhwc_blocker = blocker;
  return nchw;
}

}  // namespace sampan::cuda
