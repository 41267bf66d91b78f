// Precision assignment: layers chosen for FP16/BF16 compute and store in that
// type; Cast nodes appear only where precision changes; weights are converted
// once here. Graph inputs and outputs keep their declared types.
#include <cmath>
#include <map>
#include <set>

#include "builder/builder.h"
#include "ops/op.h"

namespace sampan::builder {

namespace {

// Ops that must see their float inputs as they are (and every op that draws random numbers).
const std::set<std::string> kKeepFp32 = {"Cast", "CastLike", "NonMaxSuppression"};

bool KeepsFp32(const ir::Node& n) {
  if (kKeepFp32.count(n.op_type)) return true;
  // If/Loop/Scan: their bodies are typed by the model, so they run as imported.
  if (!n.subgraphs().empty()) return true;
  const ops::OpDef* def = ops::FindOp(n.domain, n.op_type);
  return def != nullptr && def->determinism == ops::Determinism::kRandom;
}

// Float inputs that are not the op's data type T (scales, ratios...).
bool IsFixedFloatInput(const ir::Node& n, size_t i) {
  if (n.op_type == "Resize") return i == 1 || i == 2;
  if (n.op_type == "Upsample") return i == 1;
  if (n.op_type == "Dropout") return i == 1;
  return false;
}

// Whether constant `v` holds finite FP32 values that type `to` cannot represent:
// converted, they become infinities. The usual case is an attention mask built as
// (1 - mask) * finfo(float32).min: in FP16 (and, rounded up, in BF16) the constant is
// -inf and the unmasked positions get 0 * -inf = NaN. Such a layer stays FP32; its
// result, cast where a low-precision layer reads it, saturates only the values that
// really are out of range.
bool Overflows(const ir::Value* v, DType to) {
  if (!v || !v->is_constant() || v->data.dtype() != DType::kFloat32) return false;
  auto low = CastTensor(v->data, to);
  if (!low.ok()) return false;
  auto back = CastTensor(*low, DType::kFloat32);
  if (!back.ok()) return false;
  const float* p = v->data.data<float>();
  const float* q = back->data<float>();
  for (int64_t i = 0; i < v->data.numel(); ++i)
    if (std::isfinite(p[i]) && !std::isfinite(q[i])) return true;
  return false;
}

// Whether the op takes its float inputs in type `to` (ONNX's type constraints differ by op and
// opset: Range takes float16 only from opset 27, for instance). Asked of the op's own type
// inference, with the node's float inputs (those that follow T) in `to`; an op whose inference
// fails already in float32 is left to the usual error.
bool AcceptsLowered(const ir::Node& n, DType to, int64_t opset, const std::set<const ir::Value*>& changed) {
  const ops::OpDef* def = ops::FindOp(n.domain, n.op_type);
  if (def == nullptr || def->infer == nullptr) return true;
  auto infer = [&](bool lowered) {
    std::vector<ops::InferInput> in(n.num_inputs());
    for (size_t i = 0; i < n.num_inputs(); ++i) {
      const ir::Value* v = n.input(i);
      if (v == nullptr) continue;
      DType t = changed.count(v) ? DType::kFloat32 : v->type.dtype;
      const bool follows = t == DType::kFloat32 && !IsFixedFloatInput(n, i);
      if (lowered && follows) t = to;
      in[i] = ops::InferInput{true, t, v->type.dims, v->is_constant() && !(lowered && follows) ? &v->data : nullptr};
    }
    ops::InferContext ctx(n, opset, std::move(in));
    return def->infer(ctx).ok();
  };
  return infer(true) || !infer(false);
}

DType StorageType(Precision p) {
  switch (p) {
    case Precision::kFP16:
      return DType::kFloat16;
    case Precision::kBF16:
      return DType::kBFloat16;
    default:
      return DType::kFloat32;
  }
}

class Assigner {
 public:
  Assigner(ir::Graph& graph, const BuildConfig& config, bool lowers_bf16)
      : g_(graph), config_(config), lowers_bf16_(lowers_bf16) {}

  Result<std::map<std::string, Precision>> Run() {
    std::map<std::string, Precision> chosen;
    std::vector<ir::Node*> nodes;
    for (const auto& n : g_.nodes()) nodes.push_back(n.get());
    for (ir::Node* n : nodes) {
      bool has_float = false;
      for (const ir::Value* v : n->outputs())
        if (v && v->type.dtype == DType::kFloat32) has_float = true;
      Precision p = config_.precision == Precision::kTF32 ? Precision::kFP32 : config_.precision;
      bool pinned = false;  // a --layer-precision override names this layer
      for (const auto& lp : config_.layer_precision)
        if (GlobMatch(lp.pattern, n->name)) {
          p = lp.precision == Precision::kTF32 ? Precision::kFP32 : lp.precision;
          pinned = true;
        }
      if ((p == Precision::kFP16 || p == Precision::kBF16) && !pinned)
        for (size_t i = 0; i < n->num_inputs(); ++i)
          if (!IsFixedFloatInput(*n, i) && Overflows(n->input(i), StorageType(p))) p = Precision::kFP32;
      if (KeepsFp32(*n) || (!n->domain.empty() && n->domain != "sampan")) p = Precision::kFP32;
      if ((p == Precision::kFP16 || p == Precision::kBF16) && !AcceptsLowered(*n, StorageType(p), g_.opset(), changed_))
        p = Precision::kFP32;
      // A backend that lowers BF16 itself reads FP32 tensors and the recorded choice.
      const DType want = p == Precision::kBF16 && lowers_bf16_ ? DType::kFloat32 : StorageType(p);
      // Inputs: float values arrive in the type this node computes in.
      for (size_t i = 0; i < n->num_inputs(); ++i) {
        ir::Value* v = n->input(i);
        if (v == nullptr) continue;
        const DType have = v->type.dtype;
        const bool is_float = have == DType::kFloat32 || changed_.count(v);
        if (!is_float) continue;
        const DType target = IsFixedFloatInput(*n, i) ? DType::kFloat32 : want;
        if (have == target) continue;
        SP_ASSIGN_OR_RETURN(ir::Value * c, Converted(v, target));
        n->SetInput(i, c);
      }
      if (has_float) chosen[n->name] = p;
      if (want == DType::kFloat32) continue;
      // Ops whose output type is an attribute produce the chosen type directly.
      if (n->domain == "sampan" && n->op_type == "ImageInput")
        n->attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(want));
      for (ir::Value* v : n->outputs()) {
        if (v && v->type.dtype == DType::kFloat32) {
          v->type.dtype = want;
          changed_.insert(v);
        }
      }
    }
    // Graph outputs keep their declared type: cast back at the end.
    for (size_t i = 0; i < g_.outputs().size(); ++i) {
      ir::Value* out = g_.outputs()[i];
      if (!changed_.count(out)) continue;
      SP_ASSIGN_OR_RETURN(ir::Value * back, Converted(out, DType::kFloat32));
      // Only the graph's output slot moves to the cast; other readers keep the low-precision value.
      const std::string name = out->name();
      SP_RETURN_IF_ERROR(g_.RenameValue(out, g_.FreshName(name + "_lowp")));
      SP_RETURN_IF_ERROR(g_.RenameValue(back, name));
      g_.outputs()[i] = back;
    }
    return chosen;
  }

 private:
  // `v` in type `to`: a converted constant or a (shared) Cast node.
  Result<ir::Value*> Converted(ir::Value* v, DType to) {
    auto key = std::make_pair(v, to);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    ir::Value* out;
    if (v->is_constant()) {
      SP_ASSIGN_OR_RETURN(Tensor t, CastTensor(v->data, to));
      SP_ASSIGN_OR_RETURN(out, g_.AddConstant(g_.FreshName(StrCat(v->name(), "_", DTypeName(to))), std::move(t)));
    } else {
      ir::TensorType type = v->type;
      type.dtype = to;
      SP_ASSIGN_OR_RETURN(out, g_.AddValue(g_.FreshName(StrCat(v->name(), "_", DTypeName(to))), type));
      SP_ASSIGN_OR_RETURN(ir::Node * cast,
                          g_.AddNode("Cast", {v}, {out}, g_.FreshName(StrCat(v->name(), "_cast_", DTypeName(to)))));
      cast->attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(to));
    }
    cache_[key] = out;
    return out;
  }

  ir::Graph& g_;
  const BuildConfig& config_;
  const bool lowers_bf16_;
  std::set<const ir::Value*> changed_;
  std::map<std::pair<ir::Value*, DType>, ir::Value*> cache_;
};

}  // namespace

Result<std::map<std::string, Precision>> AssignPrecision(ir::Graph& graph, const BuildConfig& config,
                                                         bool lowers_bf16) {
  return Assigner(graph, config, lowers_bf16).Run();
}

}  // namespace sampan::builder
