// ModelProto -> ir::Graph.
#include "onnx/importer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "onnx/onnx_pb.h"
#include "ops/op.h"
#include "ops/run_node.h"

namespace sampan::onnx_import {

namespace {

using onnx::AttributeProto;

Result<ir::TensorType> TypeFromProto(const onnx::TypeProto& type, const std::string& what) {
  if (!type.has_tensor_type()) {
    if (type.has_sequence_type()) return Unsupported(what, ": sequence types are not supported");
    if (type.has_map_type()) return Unsupported(what, ": map types are not supported");
    if (type.has_optional_type()) return Unsupported(what, ": optional types are not supported");
    if (type.has_sparse_tensor_type()) return Unsupported(what, ": sparse tensors are not supported");
    return InvalidArgument(what, ": has no tensor type");
  }
  const auto& tt = type.tensor_type();
  if (!IsKnownDType(tt.elem_type())) {
    // Values past the newest type we know are element types added by newer ONNX releases.
    if (tt.elem_type() > 24 && tt.elem_type() < 64) return Unsupported(what, ": element type ", tt.elem_type(), " (newer than this build)");
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

Result<ir::Attribute> AttributeFromProto(const AttributeProto& a, const std::string& base_dir,
                                         const std::string& what) {
  if (!a.ref_attr_name().empty())
    return InvalidArgument(what, ": attribute references ('", a.ref_attr_name(), "') are only valid in functions");
  ir::Attribute out;
  AttributeProto::AttributeType type = a.type();
  if (type == AttributeProto::UNDEFINED) {  // IR < 3 style: infer from the populated field
    if (a.has_f()) type = AttributeProto::FLOAT;
    else if (a.has_i()) type = AttributeProto::INT;
    else if (a.has_s()) type = AttributeProto::STRING;
    else if (a.has_t()) type = AttributeProto::TENSOR;
    else if (a.has_g()) type = AttributeProto::GRAPH;
    else if (a.floats_size()) type = AttributeProto::FLOATS;
    else if (a.ints_size()) type = AttributeProto::INTS;
    else if (a.strings_size()) type = AttributeProto::STRINGS;
    else return InvalidArgument(what, ": attribute has no type and no value");
  }
  switch (type) {
    case AttributeProto::FLOAT: out.type = ir::AttrType::kFloat; out.f = a.f(); break;
    case AttributeProto::INT: out.type = ir::AttrType::kInt; out.i = a.i(); break;
    case AttributeProto::STRING: out.type = ir::AttrType::kString; out.s = a.s(); break;
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
      return Unsupported(what, ": subgraph attributes (control flow) are not supported");
    case AttributeProto::SPARSE_TENSOR:
    case AttributeProto::SPARSE_TENSORS:
      return Unsupported(what, ": sparse tensor attributes are not supported");
    case AttributeProto::TYPE_PROTO:
    case AttributeProto::TYPE_PROTOS:
      return Unsupported(what, ": type attributes are not supported");
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

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string base_dir)
      : model_(model), base_dir_(std::move(base_dir)), graph_(std::make_unique<ir::Graph>()) {}

  Result<std::unique_ptr<ir::Graph>> Run(const ImportOptions& options) {
    SP_RETURN_IF_ERROR(CheckHeader());
    const onnx::GraphProto& g = model_.graph();
    graph_->name = g.name().empty() ? "main" : g.name();
    if (g.sparse_initializer_size() > 0) return Unsupported("graph '", graph_->name, "': sparse initializers");
    SP_RETURN_IF_ERROR(ImportInitializers(g));
    SP_RETURN_IF_ERROR(ImportInputs(g));
    SP_RETURN_IF_ERROR(ImportNodes(g));
    SP_RETURN_IF_ERROR(ImportOutputs(g));
    SP_RETURN_IF_ERROR(ApplyValueInfo(g));
    SP_RETURN_IF_ERROR(ops::CheckOpsRegistered(*graph_));
    SP_RETURN_IF_ERROR(graph_->TopologicalSort());
    SP_RETURN_IF_ERROR(ir::Verify(*graph_));
    if (options.infer_types) SP_RETURN_IF_ERROR(ops::InferTypes(*graph_));
    return std::move(graph_);
  }

 private:
  Status CheckHeader() {
    if (!model_.has_ir_version())
      return InvalidArgument("not an ONNX model: ModelProto.ir_version is missing");
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
        return Unsupported("default-domain opset ", it->second, " is outside the supported range ", kMinOpset,
                           "..", kMaxOpset);
    }
    return Status::Ok();
  }

  Status ImportInitializers(const onnx::GraphProto& g) {
    for (int i = 0; i < g.initializer_size(); ++i) {
      const auto& t = g.initializer(i);
      std::string what = StrCat("initializer ", i, " '", t.name(), "'");
      if (t.name().empty()) return InvalidArgument(what, ": has no name");
      SP_ASSIGN_OR_RETURN(Tensor data, TensorFromProto(t, base_dir_, what));
      Result<ir::Value*> v = graph_->AddConstant(t.name(), std::move(data));
      if (!v.ok()) return v.status().WithContext(what);
    }
    return Status::Ok();
  }

  Status ImportInputs(const onnx::GraphProto& g) {
    for (int i = 0; i < g.input_size(); ++i) {
      const auto& in = g.input(i);
      std::string what = StrCat("graph input ", i, " '", in.name(), "'");
      if (in.name().empty()) return InvalidArgument(what, ": has no name");
      if (ir::Value* existing = graph_->FindValue(in.name())) {
        // An input that also has an initializer (IR < 4 style) is a constant here.
        if (existing->is_constant()) continue;
        return InvalidArgument(what, ": name is used twice");
      }
      SP_ASSIGN_OR_RETURN(ir::TensorType type, TypeFromProto(in.type(), what));
      SP_ASSIGN_OR_RETURN(ir::Value * v, graph_->AddValue(in.name(), type));
      graph_->inputs().push_back(v);
    }
    return Status::Ok();
  }

  Status ImportNodes(const onnx::GraphProto& g) {
    // Pass 1: create every node output so nodes may appear in any order.
    std::vector<std::string> node_names(static_cast<size_t>(g.node_size()));
    std::set<std::string> used_names;
    for (int n = 0; n < g.node_size(); ++n) {
      const auto& node = g.node(n);
      std::string name = node.name();
      if (name.empty() || used_names.count(name)) name = StrCat(node.op_type().empty() ? "node" : node.op_type(), "_", n);
      used_names.insert(name);
      node_names[static_cast<size_t>(n)] = name;
      std::string what = StrCat("node ", n, " (", node.op_type(), " '", name, "')");
      if (node.op_type().empty()) return InvalidArgument(what, ": op_type is empty");
      const bool is_constant = node.op_type() == "Constant" && (node.domain().empty() || node.domain() == "ai.onnx");
      for (int o = 0; o < node.output_size(); ++o) {
        const std::string& out = node.output(o);
        if (out.empty()) continue;
        if (graph_->FindValue(out))
          return InvalidArgument(what, ": output '", out, "' is already defined by another node, input or initializer");
        if (is_constant) {
          if (node.output_size() != 1) return InvalidArgument(what, ": Constant must have one output");
          SP_ASSIGN_OR_RETURN(Tensor value, ConstantValue(node, base_dir_, what));
          SP_RETURN_IF_ERROR(graph_->AddConstant(out, std::move(value)).status());
        } else {
          SP_RETURN_IF_ERROR(graph_->AddValue(out).status());
        }
      }
    }
    // Pass 2: the nodes themselves; every dangling input is reported together.
    std::vector<std::string> dangling;
    for (int n = 0; n < g.node_size(); ++n) {
      const auto& node = g.node(n);
      if (node.op_type() == "Constant" && (node.domain().empty() || node.domain() == "ai.onnx")) continue;
      const std::string& name = node_names[static_cast<size_t>(n)];
      std::string what = StrCat("node ", n, " (", node.op_type(), " '", name, "')");
      std::vector<ir::Value*> inputs;
      for (int i = 0; i < node.input_size(); ++i) {
        const std::string& in = node.input(i);
        if (in.empty()) {
          inputs.push_back(nullptr);
          continue;
        }
        ir::Value* v = graph_->FindValue(in);
        if (v == nullptr) {
          dangling.push_back(StrCat(what, " input ", i, " '", in, "'"));
          inputs.push_back(nullptr);
          continue;
        }
        inputs.push_back(v);
      }
      std::vector<ir::Value*> outputs;
      for (const auto& out : node.output()) outputs.push_back(out.empty() ? nullptr : graph_->FindValue(out));
      // Trailing omitted outputs carry no meaning.
      while (!outputs.empty() && outputs.back() == nullptr) outputs.pop_back();
      SP_ASSIGN_OR_RETURN(ir::Node * irnode, graph_->AddNode(node.op_type(), inputs, outputs, name));
      irnode->domain = node.domain() == "ai.onnx" ? "" : node.domain();
      // Attributes of unknown ops are not read: CheckOpsRegistered lists those ops.
      if (ops::FindOp(irnode->domain, irnode->op_type) == nullptr) continue;
      for (const auto& a : node.attribute()) {
        if (a.name().empty()) return InvalidArgument(what, ": attribute without a name");
        SP_ASSIGN_OR_RETURN(ir::Attribute attr, AttributeFromProto(a, base_dir_, StrCat(what, " attribute '", a.name(), "'")));
        if (!irnode->attrs.emplace(a.name(), std::move(attr)).second)
          return InvalidArgument(what, ": attribute '", a.name(), "' is given twice");
      }
    }
    if (!dangling.empty()) {
      std::string msg = StrCat(dangling.size(), " node input", dangling.size() > 1 ? "s are" : " is",
                               " not a graph input, an initializer, or any node's output:");
      for (const auto& d : dangling) msg += "\n  " + d;
      return InvalidArgument(msg);
    }
    return Status::Ok();
  }

  Status ImportOutputs(const onnx::GraphProto& g) {
    if (g.output_size() == 0) return InvalidArgument("graph '", graph_->name, "' has no outputs");
    for (int i = 0; i < g.output_size(); ++i) {
      const auto& out = g.output(i);
      std::string what = StrCat("graph output ", i, " '", out.name(), "'");
      ir::Value* v = graph_->FindValue(out.name());
      if (v == nullptr) return InvalidArgument(what, ": is not produced by any node, input or initializer");
      if (out.has_type()) {
        SP_ASSIGN_OR_RETURN(ir::TensorType type, TypeFromProto(out.type(), what));
        SP_RETURN_IF_ERROR(Declare(v, type, what));
      }
      graph_->outputs().push_back(v);
    }
    return Status::Ok();
  }

  Status ApplyValueInfo(const onnx::GraphProto& g) {
    for (const auto& vi : g.value_info()) {
      ir::Value* v = graph_->FindValue(vi.name());
      if (v == nullptr || !vi.has_type()) continue;  // stale value_info is harmless
      auto type = TypeFromProto(vi.type(), StrCat("value_info '", vi.name(), "'"));
      if (!type.ok()) continue;
      SP_RETURN_IF_ERROR(Declare(v, *type, StrCat("value_info '", vi.name(), "'")));
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

  const onnx::ModelProto& model_;
  std::string base_dir_;
  std::unique_ptr<ir::Graph> graph_;
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
