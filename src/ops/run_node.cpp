#include "ops/run_node.h"

#include <map>
#include <unordered_map>

#include "ops/op.h"

namespace sampan::ops {

namespace {
ir::Dims DimsOf(const Shape& s) {
  ir::Dims d;
  d.reserve(s.size());
  for (int64_t v : s) d.push_back(ir::Dim::Known(v));
  return d;
}
}  // namespace

Status RunNode(const ir::Node& node, int64_t opset, const std::vector<const Tensor*>& inputs,
               std::vector<Tensor>* outputs, const OutputAllocator* alloc) {
  const OpDef* def = FindOp(node.domain, node.op_type);
  if (def == nullptr) return Unsupported(node.Label(), ": op is not supported");
  std::vector<InferInput> infer_inputs(inputs.size());
  // A control-flow node's data captures go to inference by type only: with their values,
  // inference would evaluate small subgraphs itself (both branches of an If) on the reference
  // kernels, and the kernel, which runs the subgraph where the backend says
  // (SubgraphExecutor), would never run. Small integer captures (axes, shapes, indices) keep
  // their values: the shapes inside may depend on them (a Loop's zero-trip scan outputs).
  const size_t first_capture = node.num_explicit_inputs();
  auto shape_like = [](const Tensor& t) { return IsIntegerDType(t.dtype()) && t.numel() <= 64; };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) continue;
    const bool keep_value = i < first_capture || shape_like(*inputs[i]);
    infer_inputs[i] =
        InferInput{true, inputs[i]->dtype(), DimsOf(inputs[i]->shape()), keep_value ? inputs[i] : nullptr};
  }
  InferContext ictx(node, opset, std::move(infer_inputs));
  SP_RETURN_IF_ERROR(RunInfer(*def, ictx));

  KernelContext kctx{node, opset, inputs, std::vector<Tensor>(node.num_outputs()), &ictx};
  bool all_known = node.num_outputs() > 0;
  for (size_t i = 0; i < node.num_outputs(); ++i) {
    if (ictx.output_value(i)) {
      kctx.outputs[i] = *ictx.output_value(i);
      continue;
    }
    all_known = false;
    const ir::TensorType& t = ictx.output(i);
    if (t.is_static()) {
      // String elements are objects, never arena bytes: they always get their own storage.
      if (alloc != nullptr && node.output(i) != nullptr && !IsObjectDType(t.dtype)) {
        SP_ASSIGN_OR_RETURN(kctx.outputs[i], (*alloc)(i, t.dtype, t.static_shape()));
      } else {
        SP_ASSIGN_OR_RETURN(kctx.outputs[i], Tensor::Zeros(t.dtype, t.static_shape()));
      }
    }
  }
  if (!all_known) SP_RETURN_IF_ERROR(def->run(kctx));
  for (size_t i = 0; i < node.num_outputs(); ++i) {
    if (node.output(i) == nullptr) continue;
    const Tensor& out = kctx.outputs[i];
    if (!out.defined()) return Internal(node.Label(), ": kernel did not produce output ", i);
    const ir::TensorType& t = ictx.output(i);
    if (t.dtype != DType::kUndefined && t.dtype != out.dtype())
      return Internal(node.Label(), ": output ", i, " is ", out.Describe(), " but inference said ", t.ToString());
    if (t.is_static() && t.static_shape() != out.shape())
      return Internal(node.Label(), ": output ", i, " is ", out.Describe(), " but inference said ", t.ToString());
  }
  *outputs = std::move(kctx.outputs);
  return Status::Ok();
}

Status CheckOpsRegistered(const ir::Graph& graph) {
  std::map<std::string, std::vector<std::string>> missing;
  for (const auto& n : graph.nodes()) {
    if (FindOp(n->domain, n->op_type) == nullptr) {
      std::string key = n->domain.empty() ? n->op_type : n->domain + "::" + n->op_type;
      missing[key].push_back(n->name.empty() ? "<unnamed>" : n->name);
    }
  }
  if (missing.empty()) return Status::Ok();
  std::string msg = StrCat(missing.size(), " unsupported op type", missing.size() > 1 ? "s" : "", ":");
  for (auto& [op, nodes] : missing) {
    msg += StrCat("\n  ", op, " (", nodes.size(), " node", nodes.size() > 1 ? "s" : "", ": ");
    for (size_t i = 0; i < nodes.size() && i < 8; ++i) msg += (i ? ", " : "") + nodes[i];
    if (nodes.size() > 8) msg += StrCat(", ... ", nodes.size() - 8, " more");
    msg += ")";
  }
  return Unsupported(msg);
}

namespace {

// Merges `inferred` into `declared`; error text on contradiction.
Status MergeType(const ir::Node& node, ir::Value& v, const ir::TensorType& inferred) {
  ir::TensorType& declared = v.type;
  auto mismatch = [&]() {
    return InvalidArgument(node.Label(), ": output '", v.name(), "' is declared ", declared.ToString(),
                           " but the op produces ", inferred.ToString(), " (inconsistent shapes)");
  };
  if (inferred.dtype != DType::kUndefined) {
    if (declared.dtype != DType::kUndefined && declared.dtype != inferred.dtype) return mismatch();
    declared.dtype = inferred.dtype;
  }
  if (!inferred.dims) return Status::Ok();
  if (!declared.dims) {
    declared.dims = inferred.dims;
    return Status::Ok();
  }
  if (declared.dims->size() != inferred.dims->size()) return mismatch();
  for (size_t i = 0; i < declared.dims->size(); ++i) {
    ir::Dim& d = (*declared.dims)[i];
    const ir::Dim& e = (*inferred.dims)[i];
    if (e.known()) {
      if (d.known() && d.value != e.value) return mismatch();
      d = e;
    } else if (!d.known() && d.param.empty()) {
      d = e;
    }
  }
  return Status::Ok();
}

}  // namespace

Status InferTypes(ir::Graph& graph, const InferOptions& options) {
  SP_RETURN_IF_ERROR(CheckOpsRegistered(graph));
  SP_RETURN_IF_ERROR(graph.TopologicalSort());
  const int64_t opset = graph.opset();
  std::unordered_map<const ir::Value*, Tensor> known;  // values found by folding
  for (ir::Value* v : graph.values())
    if (v->is_constant()) known[v] = v->data;
  std::vector<std::string> unsupported;

  for (const auto& node_ptr : graph.nodes()) {
    ir::Node& node = *node_ptr;
    const OpDef* def = FindOp(node.domain, node.op_type);
    std::vector<InferInput> inputs(node.num_inputs());
    bool all_values = true;
    int64_t fold_elems = 0;
    bool input_unknown = false;
    for (size_t i = 0; i < node.num_inputs(); ++i) {
      ir::Value* in = node.input(i);
      if (in == nullptr) continue;
      auto it = known.find(in);
      const Tensor* value = it == known.end() ? nullptr : &it->second;
      inputs[i] = InferInput{true, in->type.dtype, in->type.dims, value};
      if (in->type.dtype == DType::kUndefined) input_unknown = true;
      if (value == nullptr)
        all_values = false;
      else
        fold_elems += value->numel();
    }
    if (input_unknown) continue;  // an upstream unsupported node left this unknown
    InferContext ctx(node, opset, std::move(inputs));
    Status st = RunInfer(*def, ctx);
    if (st.code() == StatusCode::kUnsupported) {
      unsupported.push_back(st.message());
      continue;
    }
    SP_RETURN_IF_ERROR(st);
    for (size_t i = 0; i < node.num_outputs(); ++i) {
      ir::Value* out = node.output(i);
      if (out == nullptr) continue;
      SP_RETURN_IF_ERROR(MergeType(node, *out, ctx.output(i)));
      if (ctx.output_value(i)) known[out] = *ctx.output_value(i);
    }
    bool fold =
        all_values && fold_elems <= options.max_fold_elements && node.num_outputs() > 0 && !IsNondeterministic(node);
    for (size_t i = 0; fold && i < node.num_outputs(); ++i) {
      if (node.output(i) && known.count(node.output(i))) fold = false;
      // Small inputs can make a huge output (ConstantOfShape, Expand, Tile): when the
      // inferred shape already says so, it is not computed just to be dropped (a plan
      // or model of a few bytes made this allocate gigabytes; found by tests/fuzz).
      const ir::TensorType& t = ctx.output(i);
      if (fold && t.is_static() && !CheckShape(t.static_shape(), options.max_fold_elements).ok()) fold = false;
    }
    if (fold) {
      std::vector<const Tensor*> in_ptrs(node.num_inputs(), nullptr);
      for (size_t i = 0; i < node.num_inputs(); ++i)
        if (node.input(i)) in_ptrs[i] = &known[node.input(i)];
      std::vector<Tensor> outs;
      Status run = RunNode(node, opset, in_ptrs, &outs);
      if (run.code() == StatusCode::kUnsupported) continue;
      SP_RETURN_IF_ERROR(run);
      for (size_t i = 0; i < node.num_outputs(); ++i) {
        ir::Value* out = node.output(i);
        if (out == nullptr) continue;
        SP_RETURN_IF_ERROR(MergeType(node, *out, ir::TensorType::Static(outs[i].dtype(), outs[i].shape())));
        if (outs[i].numel() <= options.max_fold_elements) known[out] = std::move(outs[i]);
      }
    }
  }
  if (!unsupported.empty()) {
    std::string msg =
        StrCat(unsupported.size(), " node", unsupported.size() > 1 ? "s use" : " uses", " unsupported features:");
    for (const auto& u : unsupported) msg += "\n  " + u;
    return Unsupported(msg);
  }
  return Status::Ok();
}

}  // namespace sampan::ops
