// ModelProto -> ir::Graph.
#include "onnx/importer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ir/subgraph.h"
#include "onnx/onnx_pb.h"
#include "ops/control_flow.h"
#include "ops/op.h"
#include "ops/run_node.h"

namespace sampan::onnx_import {

namespace {

using onnx::AttributeProto;

Result<ir::TensorType> TypeFromProto(const onnx::TypeProto& type, const std::string& what) {
  if (!type.has_tensor_type()) {
    // A sequence or optional: one value of shape [] holding tensors (base/tensor.h). What it
    // holds is checked for support here; its type is known again at run time.
    if (type.has_sequence_type() || type.has_optional_type()) {
      const bool seq = type.has_sequence_type();
      const onnx::TypeProto& elem = seq ? type.sequence_type().elem_type() : type.optional_type().elem_type();
      if (elem.has_map_type())
        return Unsupported(what, ": ", seq ? "sequences" : "optionals", " of maps are not supported");
      if (elem.has_tensor_type() || elem.has_sequence_type() || elem.has_optional_type())
        SP_RETURN_IF_ERROR(TypeFromProto(elem, what).status());
      return ir::TensorType{seq ? DType::kSequence : DType::kOptional, ir::Dims{}};
    }
    if (type.has_map_type()) return Unsupported(what, ": map types are not supported");
    if (type.has_sparse_tensor_type()) return Unsupported(what, ": sparse tensors are not supported");
    return InvalidArgument(what, ": has no tensor type");
  }
  const auto& tt = type.tensor_type();
  if (!IsKnownDType(tt.elem_type())) {
    // Values past the newest type we know are element types added by newer ONNX releases.
    if (tt.elem_type() > 28 && tt.elem_type() < 64)
      return Unsupported(what, ": element type ", tt.elem_type(), " (newer than this build)");
    return InvalidArgument(what, ": unknown elem_type ", tt.elem_type());
  }
  ir::TensorType out;
  out.dtype = static_cast<DType>(tt.elem_type());
  if (!IsStorableDType(out.dtype)) return Unsupported(what, ": element type ", DTypeName(out.dtype));
  if (tt.has_shape()) {
    out.dims = ir::Dims{};
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        // Some exporters (Paddle2ONNX) write -1 for a dynamic dim; ONNX Runtime accepts it as unknown.
        out.dims->push_back(d.dim_value() < 0 ? ir::Dim::Unknown() : ir::Dim::Known(d.dim_value()));
      } else if (d.has_dim_param()) {
        // "?" is how some exporters (Paddle2ONNX) spell an anonymous dim, not a shared symbol.
        out.dims->push_back(d.dim_param() == "?" ? ir::Dim::Unknown() : ir::Dim::Symbol(d.dim_param()));
      } else {
        out.dims->push_back(ir::Dim::Unknown());
      }
    }
  }
  return out;
}

// "tensor(f32)", "seq(tensor(i64))", "optional(seq(tensor(f32)))": a TypeProto as text.
Result<std::string> TypeDescription(const onnx::TypeProto& t, const std::string& what, int depth = 0) {
  if (depth > 16) return InvalidArgument(what, ": type nested too deeply");
  if (t.has_tensor_type()) {
    const int32_t e = t.tensor_type().elem_type();
    if (!IsKnownDType(e)) return InvalidArgument(what, ": unknown elem_type ", e);
    return StrCat("tensor(", DTypeName(static_cast<DType>(e)), ")");
  }
  if (t.has_sequence_type()) {
    SP_ASSIGN_OR_RETURN(std::string inner, TypeDescription(t.sequence_type().elem_type(), what, depth + 1));
    return StrCat("seq(", inner, ")");
  }
  if (t.has_optional_type()) {
    SP_ASSIGN_OR_RETURN(std::string inner, TypeDescription(t.optional_type().elem_type(), what, depth + 1));
    return StrCat("optional(", inner, ")");
  }
  return Unsupported(what, ": type attributes other than tensor, sequence and optional types");
}

Result<ir::Attribute> AttributeFromProto(const AttributeProto& a, const std::string& base_dir,
                                         const std::string& what) {
  if (!a.ref_attr_name().empty())
    return InvalidArgument(what, ": attribute references ('", a.ref_attr_name(), "') are only valid in functions");
  ir::Attribute out;
  AttributeProto::AttributeType type = a.type();
  if (type == AttributeProto::UNDEFINED) {  // IR < 3 style: infer from the populated field
    if (a.has_f())
      type = AttributeProto::FLOAT;
    else if (a.has_i())
      type = AttributeProto::INT;
    else if (a.has_s())
      type = AttributeProto::STRING;
    else if (a.has_t())
      type = AttributeProto::TENSOR;
    else if (a.has_g())
      type = AttributeProto::GRAPH;
    else if (a.floats_size())
      type = AttributeProto::FLOATS;
    else if (a.ints_size())
      type = AttributeProto::INTS;
    else if (a.strings_size())
      type = AttributeProto::STRINGS;
    else
      return InvalidArgument(what, ": attribute has no type and no value");
  }
  switch (type) {
    case AttributeProto::FLOAT:
      out.type = ir::AttrType::kFloat;
      out.f = a.f();
      break;
    case AttributeProto::INT:
      out.type = ir::AttrType::kInt;
      out.i = a.i();
      break;
    case AttributeProto::STRING:
      out.type = ir::AttrType::kString;
      out.s = a.s();
      break;
    case AttributeProto::FLOATS:
      out.type = ir::AttrType::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case AttributeProto::INTS:
      out.type = ir::AttrType::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case AttributeProto::STRINGS:
      out.type = ir::AttrType::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case AttributeProto::TENSOR: {
      out.type = ir::AttrType::kTensor;
      SP_ASSIGN_OR_RETURN(out.t, TensorFromProto(a.t(), base_dir, what));
      break;
    }
    case AttributeProto::TENSORS:
      out.type = ir::AttrType::kTensors;
      for (const auto& t : a.tensors()) {
        SP_ASSIGN_OR_RETURN(Tensor v, TensorFromProto(t, base_dir, what));
        out.tensors.push_back(std::move(v));
      }
      break;
    case AttributeProto::GRAPH:
    case AttributeProto::GRAPHS:
      return Internal(what, ": subgraph attributes are imported with their scope (Importer::SubgraphsFromProto)");
    case AttributeProto::SPARSE_TENSOR:
    case AttributeProto::SPARSE_TENSORS:
      return Unsupported(what, ": sparse tensor attributes are not supported");
    case AttributeProto::TYPE_PROTO: {
      // Only the Optional op has one (`type`, an empty optional's type): kept as its description.
      SP_ASSIGN_OR_RETURN(out.s, TypeDescription(a.tp(), what));
      out.type = ir::AttrType::kString;
      break;
    }
    case AttributeProto::TYPE_PROTOS:
      return Unsupported(what, ": lists of type attributes are not supported");
    default:
      return InvalidArgument(what, ": unknown attribute type ", static_cast<int>(type));
  }
  return out;
}

// Turns a Constant node into the tensor it defines.
Result<Tensor> ConstantValue(const onnx::NodeProto& node, const std::string& base_dir, const std::string& what) {
  if (node.attribute_size() != 1)
    return InvalidArgument(what, ": Constant needs exactly one value attribute, has ", node.attribute_size());
  const AttributeProto& a = node.attribute(0);
  const std::string& key = a.name();
  if (key == "value") return TensorFromProto(a.t(), base_dir, what);
  if (key == "value_float") return Tensor::FromVector<float>(DType::kFloat32, {a.f()}, {});
  if (key == "value_floats")
    return Tensor::FromVector<float>(DType::kFloat32, {a.floats().begin(), a.floats().end()},
                                     {static_cast<int64_t>(a.floats_size())});
  if (key == "value_int") return Tensor::FromVector<int64_t>(DType::kInt64, {a.i()}, {});
  if (key == "value_ints")
    return Tensor::FromVector<int64_t>(DType::kInt64, {a.ints().begin(), a.ints().end()},
                                       {static_cast<int64_t>(a.ints_size())});
  if (key == "value_string" || key == "value_strings") return Unsupported(what, ": string constants");
  if (key == "sparse_value") return Unsupported(what, ": sparse constants");
  return InvalidArgument(what, ": Constant has unknown attribute '", key, "'");
}

// One graph being imported: the model's graph or a subgraph, inside the scopes enclosing it.
struct Scope {
  ir::Graph* graph = nullptr;
  const Scope* parent = nullptr;  //!< nullptr for the model's graph
  std::string where;              //!< prefix of errors inside a subgraph: "node 3 (Loop 'l') attribute 'body': "
};

// A value visible in `scope` by name: its own, or an enclosing graph's, which the subgraph
// then reads through a capture (created here, and in every scope in between).
ir::Value* Resolve(const Scope& scope, const std::string& name) {
  if (ir::Value* v = scope.graph->FindValue(name)) return v;
  if (scope.parent == nullptr) return nullptr;
  ir::Value* outer = Resolve(*scope.parent, name);
  if (outer == nullptr) return nullptr;
  auto capture = scope.graph->AddCapture(name, outer->type);
  return capture.ok() ? *capture : nullptr;
}

// A declared type: an empty TypeProto (some exporters write one for subgraph values) says nothing.
bool HasType(const onnx::ValueInfoProto& vi) {
  return vi.has_type() && vi.type().value_case() != onnx::TypeProto::VALUE_NOT_SET;
}

bool IsConstantNode(const onnx::NodeProto& node) {
  return node.op_type() == "Constant" && (node.domain().empty() || node.domain() == "ai.onnx");
}

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string base_dir)
      : model_(model), base_dir_(std::move(base_dir)), graph_(std::make_unique<ir::Graph>()) {}

  Result<std::unique_ptr<ir::Graph>> Run(const ImportOptions& options) {
    SP_RETURN_IF_ERROR(CheckHeader());
    const onnx::GraphProto& g = model_.graph();
    graph_->name = g.name().empty() ? "main" : g.name();
    Scope top{graph_.get(), nullptr, ""};
    SP_RETURN_IF_ERROR(ImportGraph(g, top));
    SP_RETURN_IF_ERROR(ops::CheckOpsRegistered(*graph_));
    Status sub_ops = Status::Ok();
    graph_->ForEachSubgraph([&](ir::Graph& sub) {
      if (sub_ops.ok()) sub_ops = ops::CheckOpsRegistered(sub).WithContext(StrCat("subgraph '", sub.name, "'"));
    });
    SP_RETURN_IF_ERROR(sub_ops);
    SP_RETURN_IF_ERROR(graph_->TopologicalSort());
    SP_RETURN_IF_ERROR(ir::Verify(*graph_));
    if (options.infer_types) {
      SP_RETURN_IF_ERROR(ops::InferTypes(*graph_));
      ops::AnnotateSubgraphTypes(*graph_);
    }
    return std::move(graph_);
  }

 private:
  Status CheckHeader() {
    if (!model_.has_ir_version()) return InvalidArgument("not an ONNX model: ModelProto.ir_version is missing");
    const int64_t irv = model_.ir_version();
    if (irv < kMinIrVersion || irv > kMaxIrVersion)
      return Unsupported("ONNX IR version ", irv, " is outside the supported range ", kMinIrVersion, "..",
                         kMaxIrVersion);
    if (!model_.has_graph()) return InvalidArgument("not an ONNX model: ModelProto.graph is missing");
    for (const auto& op : model_.opset_import()) {
      std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
      graph_->opsets[domain] = op.version();
    }
    if (model_.opset_import_size() == 0) return InvalidArgument("ONNX model has no opset_import");
    auto it = graph_->opsets.find("");
    if (it != graph_->opsets.end()) {
      if (it->second < kMinOpset || it->second > kMaxOpset)
        return Unsupported("default-domain opset ", it->second, " is outside the supported range ", kMinOpset, "..",
                           kMaxOpset);
    }
    return Status::Ok();
  }

  Status ImportGraph(const onnx::GraphProto& g, const Scope& scope) {
    if (g.sparse_initializer_size() > 0)
      return Unsupported(scope.where, "graph '", scope.graph->name, "': sparse initializers");
    SP_RETURN_IF_ERROR(ImportInitializers(g, scope));
    SP_RETURN_IF_ERROR(ImportInputs(g, scope));
    SP_RETURN_IF_ERROR(ImportNodes(g, scope));
    SP_RETURN_IF_ERROR(ImportOutputs(g, scope));
    return ApplyValueInfo(g, scope);
  }

  Status ImportInitializers(const onnx::GraphProto& g, const Scope& scope) {
    for (int i = 0; i < g.initializer_size(); ++i) {
      const auto& t = g.initializer(i);
      std::string what = StrCat(scope.where, "initializer ", i, " '", t.name(), "'");
      if (t.name().empty()) return InvalidArgument(what, ": has no name");
      SP_ASSIGN_OR_RETURN(Tensor data, TensorFromProto(t, base_dir_, what));
      Result<ir::Value*> v = scope.graph->AddConstant(t.name(), std::move(data));
      if (!v.ok()) return v.status().WithContext(what);
    }
    return Status::Ok();
  }

  Status ImportInputs(const onnx::GraphProto& g, const Scope& scope) {
    ir::Graph& graph = *scope.graph;
    for (int i = 0; i < g.input_size(); ++i) {
      const auto& in = g.input(i);
      std::string what = StrCat(scope.where, "graph input ", i, " '", in.name(), "'");
      if (in.name().empty()) return InvalidArgument(what, ": has no name");
      if (ir::Value* existing = graph.FindValue(in.name())) {
        // An input that also has an initializer (IR < 4 style) is a constant here.
        if (existing->is_constant() && scope.parent == nullptr) continue;
        return InvalidArgument(what, ": name is used twice");
      }
      // A subgraph's inputs may leave their type to the node that runs it (no type, or an empty one).
      ir::TensorType type;
      if (scope.parent == nullptr || HasType(in)) {
        SP_ASSIGN_OR_RETURN(type, TypeFromProto(in.type(), what));
      }
      SP_ASSIGN_OR_RETURN(ir::Value * v, graph.AddValue(in.name(), type));
      graph.inputs().push_back(v);
    }
    return Status::Ok();
  }

  Status ImportNodes(const onnx::GraphProto& g, const Scope& scope) {
    ir::Graph& graph = *scope.graph;
    // Pass 1: create every node output so nodes may appear in any order.
    std::vector<std::string> node_names(static_cast<size_t>(g.node_size()));
    std::set<std::string> used_names;
    for (int n = 0; n < g.node_size(); ++n) {
      const auto& node = g.node(n);
      std::string name = node.name();
      if (name.empty() || used_names.count(name))
        name = StrCat(node.op_type().empty() ? "node" : node.op_type(), "_", n);
      used_names.insert(name);
      node_names[static_cast<size_t>(n)] = name;
      std::string what = StrCat(scope.where, "node ", n, " (", node.op_type(), " '", name, "')");
      if (node.op_type().empty()) return InvalidArgument(what, ": op_type is empty");
      for (int o = 0; o < node.output_size(); ++o) {
        const std::string& out = node.output(o);
        if (out.empty()) continue;
        if (graph.FindValue(out))
          return InvalidArgument(what, ": output '", out, "' is already defined by another node, input or initializer");
        if (IsConstantNode(node)) {
          if (node.output_size() != 1) return InvalidArgument(what, ": Constant must have one output");
          SP_ASSIGN_OR_RETURN(Tensor value, ConstantValue(node, base_dir_, what));
          SP_RETURN_IF_ERROR(graph.AddConstant(out, std::move(value)).status());
        } else {
          SP_RETURN_IF_ERROR(graph.AddValue(out).status());
        }
      }
    }
    // Pass 2: the nodes themselves; every dangling input is reported together.
    std::vector<std::string> dangling;
    for (int n = 0; n < g.node_size(); ++n) {
      const auto& node = g.node(n);
      if (IsConstantNode(node)) continue;
      const std::string& name = node_names[static_cast<size_t>(n)];
      std::string what = StrCat(scope.where, "node ", n, " (", node.op_type(), " '", name, "')");
      std::vector<ir::Value*> inputs;
      for (int i = 0; i < node.input_size(); ++i) {
        const std::string& in = node.input(i);
        if (in.empty()) {
          inputs.push_back(nullptr);
          continue;
        }
        ir::Value* v = Resolve(scope, in);
        if (v == nullptr) {
          dangling.push_back(StrCat(what, " input ", i, " '", in, "'"));
          inputs.push_back(nullptr);
          continue;
        }
        inputs.push_back(v);
      }
      std::vector<ir::Value*> outputs;
      for (const auto& out : node.output()) outputs.push_back(out.empty() ? nullptr : graph.FindValue(out));
      // Trailing omitted outputs carry no meaning.
      while (!outputs.empty() && outputs.back() == nullptr) outputs.pop_back();
      SP_ASSIGN_OR_RETURN(ir::Node * irnode, graph.AddNode(node.op_type(), inputs, outputs, name));
      irnode->domain = node.domain() == "ai.onnx" ? "" : node.domain();
      // Attributes of unknown ops are not read: CheckOpsRegistered lists those ops.
      if (ops::FindOp(irnode->domain, irnode->op_type) == nullptr) continue;
      for (const auto& a : node.attribute()) {
        if (a.name().empty()) return InvalidArgument(what, ": attribute without a name");
        const std::string attr_what = StrCat(what, " attribute '", a.name(), "'");
        ir::Attribute attr;
        if (IsGraphAttribute(a)) {
          SP_ASSIGN_OR_RETURN(attr, SubgraphsFromProto(a, scope, attr_what));
        } else {
          SP_ASSIGN_OR_RETURN(attr, AttributeFromProto(a, base_dir_, attr_what));
        }
        if (!irnode->attrs.emplace(a.name(), std::move(attr)).second)
          return InvalidArgument(what, ": attribute '", a.name(), "' is given twice");
      }
      Status bound = ir::BindCaptures(irnode, [&](const std::string& n) { return Resolve(scope, n); });
      if (!bound.ok()) return bound.WithContext(what);
    }
    if (!dangling.empty()) {
      std::string msg = StrCat(dangling.size(), " node input", dangling.size() > 1 ? "s are" : " is",
                               scope.parent ? " not defined in the subgraph or any graph enclosing it:"
                                            : " not a graph input, an initializer, or any node's output:");
      for (const auto& d : dangling) msg += "\n  " + d;
      return InvalidArgument(msg);
    }
    return Status::Ok();
  }

  static bool IsGraphAttribute(const AttributeProto& a) {
    if (a.type() == AttributeProto::GRAPH || a.type() == AttributeProto::GRAPHS) return true;
    return a.type() == AttributeProto::UNDEFINED && (a.has_g() || a.graphs_size() > 0) && !a.has_f() && !a.has_i() &&
           !a.has_s() && !a.has_t();
  }

  Result<ir::Attribute> SubgraphsFromProto(const AttributeProto& a, const Scope& scope, const std::string& what) {
    if (!a.ref_attr_name().empty())
      return InvalidArgument(what, ": attribute references ('", a.ref_attr_name(), "') are only valid in functions");
    ir::Attribute out;
    const bool single = a.type() == AttributeProto::GRAPH || (a.type() == AttributeProto::UNDEFINED && a.has_g());
    if (single && !a.has_g()) return InvalidArgument(what, ": graph attribute has no graph");
    std::vector<const onnx::GraphProto*> protos;
    if (single)
      protos.push_back(&a.g());
    else
      for (const auto& g : a.graphs()) protos.push_back(&g);
    if (++depth_ > kMaxSubgraphDepth)
      return InvalidArgument(what, ": subgraphs nested deeper than ", kMaxSubgraphDepth);
    for (size_t i = 0; i < protos.size(); ++i) {
      auto sub = std::make_shared<ir::Graph>();
      sub->name = protos[i]->name().empty() ? a.name() : protos[i]->name();
      sub->opsets = graph_->opsets;
      Scope inner{sub.get(), &scope, single ? StrCat(what, ": ") : StrCat(what, " graph ", i, ": ")};
      SP_RETURN_IF_ERROR(ImportGraph(*protos[i], inner));
      if (single)
        out = ir::Attribute::OfGraph(std::move(sub));
      else
        out.graphs.push_back(std::move(sub));
    }
    --depth_;
    if (!single) out.type = ir::AttrType::kGraphs;
    return out;
  }

  Status ImportOutputs(const onnx::GraphProto& g, const Scope& scope) {
    ir::Graph& graph = *scope.graph;
    if (g.output_size() == 0) return InvalidArgument(scope.where, "graph '", graph.name, "' has no outputs");
    for (int i = 0; i < g.output_size(); ++i) {
      const auto& out = g.output(i);
      std::string what = StrCat(scope.where, "graph output ", i, " '", out.name(), "'");
      ir::Value* v = Resolve(scope, out.name());
      if (v == nullptr)
        return InvalidArgument(what, scope.parent ? ": is not defined in the subgraph or any graph enclosing it"
                                                  : ": is not produced by any node, input or initializer");
      if (HasType(out)) {
        SP_ASSIGN_OR_RETURN(ir::TensorType type, TypeFromProto(out.type(), what));
        SP_RETURN_IF_ERROR(Declare(v, type, what));
      }
      graph.outputs().push_back(v);
    }
    return Status::Ok();
  }

  static Status ApplyValueInfo(const onnx::GraphProto& g, const Scope& scope) {
    for (const auto& vi : g.value_info()) {
      ir::Value* v = scope.graph->FindValue(vi.name());
      if (v == nullptr || !vi.has_type()) continue;  // stale value_info is harmless
      auto type = TypeFromProto(vi.type(), StrCat("value_info '", vi.name(), "'"));
      if (!type.ok()) continue;
      SP_RETURN_IF_ERROR(Declare(v, *type, StrCat(scope.where, "value_info '", vi.name(), "'")));
    }
    return Status::Ok();
  }

  // Records a declared type on a value; a declaration contradicting a constant's data is an error.
  static Status Declare(ir::Value* v, const ir::TensorType& type, const std::string& what) {
    if (v->is_constant()) {
      if (type.dtype != v->data.dtype())
        return InvalidArgument(what, ": declared ", type.ToString(), " but the constant is ", v->data.Describe());
      return Status::Ok();
    }
    if (type.dtype != DType::kUndefined && v->type.dtype != DType::kUndefined && type.dtype != v->type.dtype)
      return InvalidArgument(what, ": declared ", type.ToString(), " but also ", v->type.ToString());
    if (v->type.dtype == DType::kUndefined) v->type.dtype = type.dtype;
    if (!v->type.dims) v->type.dims = type.dims;
    return Status::Ok();
  }

  //! Subgraphs within subgraphs deeper than this are refused (a crafted file must not exhaust the stack).
  static constexpr int kMaxSubgraphDepth = 64;

  const onnx::ModelProto& model_;
  std::string base_dir_;
  std::unique_ptr<ir::Graph> graph_;
  int depth_ = 0;
};

}  // namespace

Result<std::unique_ptr<ir::Graph>> ImportModelBytes(const std::string& bytes, const std::string& base_dir,
                                                    const ImportOptions& options) {
  if (bytes.empty()) return InvalidArgument("model is empty (0 bytes)");
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    return InvalidArgument("not an ONNX model: the bytes do not parse as a ModelProto (truncated or not protobuf)");
  Importer importer(model, base_dir);
  return importer.Run(options);
}

Result<std::unique_ptr<ir::Graph>> ImportModelFile(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return NotFound("model file '", path, "' does not exist");
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open model file '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string dir = std::filesystem::absolute(path, ec).parent_path().string();
  auto graph = ImportModelBytes(bytes, dir, options);
  if (!graph.ok()) return graph.status().WithContext(path);
  return graph;
}

}  // namespace sampan::onnx_import
