#include "backends/cuda/capability.h"

#include <unordered_map>
#include <unordered_set>

#include "backends/cuda/layout.h"
#include "backends/cuda/node_kernel.h"
#include "ops/op.h"
#include "ops/run_node.h"

namespace sampan::cuda {
namespace {

using Where = NodeSupport::Where;

// One walk in graph order with the values the host knows (constants, folded shape
// arithmetic). `nhwc` is the channels-last plan; a host or folded node touching one of
// those values is named in *blocker (the runtime then plans the graph NCHW).
Result<Capability> Walk(const ir::Graph& g, const std::unordered_set<const ir::Value*>& nhwc) {
  Capability cap;
  cap.channels_last_values = nhwc.size();
  std::unordered_map<const ir::Value*, Tensor> known;
  const RunEnv env{};
  const int64_t opset = g.opset();
  std::string data_dependent;  // first node whose output shape needs device data
  auto touches_nhwc = [&](const ir::Node& n) {
    for (const ir::Value* v : n.inputs())
      if (v && nhwc.count(v)) return true;
    for (const ir::Value* v : n.outputs())
      if (v && nhwc.count(v)) return true;
    return false;
  };
  for (const auto& np : g.nodes()) {
    const ir::Node& node = *np;
    NodeSupport& ns = cap.nodes[node.name];
    ns.family = "host";
    std::vector<ops::InferInput> inf(node.num_inputs());
    std::vector<KernelInput> kin(node.num_inputs());
    bool all_known = true, static_in = true;
    for (size_t i = 0; i < node.num_inputs(); ++i) {
      const ir::Value* v = node.input(i);
      if (!v) continue;
      const Tensor* host = v->is_constant() ? &v->data : nullptr;
      if (auto it = known.find(v); it != known.end()) host = &it->second;
      if (!v->type.is_static()) {
        static_in = false;
        continue;
      }
      inf[i] = ops::InferInput{true, v->type.dtype, v->type.dims, host};
      kin[i] = KernelInput{true, v->type.dtype, v->type.static_shape(), host};
      all_known = all_known && host != nullptr;
    }
    if (!data_dependent.empty() || !static_in) {
      ns.reason = data_dependent.empty() ? "an input shape is not known before run time" : data_dependent;
      continue;
    }
    const ops::OpDef* def = ops::FindOp(node.domain, node.op_type);
    if (!def) return Unsupported(node.Label(), ": op is not registered");
    ops::InferContext ictx(node, opset, inf);
    SP_RETURN_IF_ERROR(def->infer(ictx));
    std::vector<KernelOutput> kout(node.num_outputs());
    bool static_out = true, values_known = true;
    int64_t out_elems = 0;
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      if (!node.output(k)) continue;
      const ir::TensorType& t = ictx.output(k);
      if (!t.is_static()) {
        static_out = false;
        continue;
      }
      kout[k] = KernelOutput{t.dtype, t.static_shape()};
      out_elems += NumElements(kout[k].shape);
      values_known = values_known && ictx.output_value(k).has_value();
    }
    if (!static_out) {
      // The runtime cannot plan device memory past this node: the whole graph runs on the host.
      data_dependent = StrCat("the graph runs on the host: ", node.Label(),
                              " has an output shape that depends on values computed at run time");
      ns.reason = data_dependent;
      continue;
    }
    if (FoldsOnHost(node, values_known, all_known, out_elems)) {
      std::vector<Tensor> outs;
      if (values_known) {
        for (size_t k = 0; k < node.num_outputs(); ++k) outs.push_back(node.output(k) ? *ictx.output_value(k) : Tensor());
      } else {
        std::vector<const Tensor*> args;
        for (size_t i = 0; i < node.num_inputs(); ++i) args.push_back(kin[i].host);
        SP_RETURN_IF_ERROR(ops::RunNode(node, opset, args, &outs));
      }
      for (size_t k = 0; k < node.num_outputs(); ++k)
        if (node.output(k)) known[node.output(k)] = outs[k];
      ns.where = Where::kFolded;
      ns.family = "folded";
      if (touches_nhwc(node) && cap.nhwc_blocker.empty()) cap.nhwc_blocker = node.Label();
      continue;
    }
    KernelOptions opt;
    opt.check_only = true;
    for (const ir::Value* v : node.inputs()) opt.in_nhwc.push_back(v && nhwc.count(v));
    opt.out_nhwc = node.num_outputs() > 0 && node.output(0) && nhwc.count(node.output(0));
    auto choice = MakeKernel(node, opset, kin, kout, opt, env);
    if (choice.ok()) {
      ns.where = choice->view ? Where::kView : Where::kDevice;
      ns.family = choice->view ? "view" : StaticKernelFamily(node);
      continue;
    }
    if (choice.status().code() != StatusCode::kUnsupported) return choice.status();
    ns.where = Where::kHost;
    ns.family = "host";
    ns.reason = choice.status().message();
    if (touches_nhwc(node) && cap.nhwc_blocker.empty()) cap.nhwc_blocker = node.Label();
  }
  if (!data_dependent.empty())
    for (auto& [name, ns] : cap.nodes)
      if (ns.where != Where::kFolded) {
        ns.where = Where::kHost;
        ns.family = "host";
        if (ns.reason.empty()) ns.reason = data_dependent;
      }
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
