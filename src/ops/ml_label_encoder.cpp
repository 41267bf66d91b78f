// ai.onnx.ml LabelEncoder (opsets 1-4: keys and values as int64/float/string lists or, from 4,
// tensors of any of string, int64, int32, int16, float, double) and CategoryMapper (string <->
// int64). Lookups are exact; float keys match by value, with NaN matching NaN and -0 matching 0.
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "ops/ml_common.h"

namespace sampan::ops::ml {
namespace {

// Keys of every type as one hashable string: a kind byte plus the value's bytes.
std::string KeyOf(const Tensor& t, int64_t i) {
  const DType d = t.dtype();
  if (d == DType::kString) return "s" + t.strings()[i];
  if (IsFloatDType(d)) {
    double v = ElementAsDouble(t, i);
    if (std::isnan(v)) return "n";
    if (v == 0) v = 0;  // -0 matches 0
    std::string k = "f";
    k.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return k;
  }
  const int64_t v = ElementAsInt64(t, i);
  std::string k = "i";
  k.append(reinterpret_cast<const char*>(&v), sizeof(v));
  return k;
}

// The keys, values and default of one LabelEncoder node, as tensors.
struct Mapping {
  Tensor keys, values, dflt;
};

Result<Tensor> ListAttr(const ir::Node& node, const std::string& suffix_strings, const std::string& suffix_ints,
                        const std::string& suffix_floats, const std::string& tensor_name, const char* what) {
  const ir::Attribute* s = node.attr(suffix_strings);
  const ir::Attribute* i = node.attr(suffix_ints);
  const ir::Attribute* f = node.attr(suffix_floats);
  const ir::Attribute* t = node.attr(tensor_name);
  const int given = (s != nullptr) + (i != nullptr) + (f != nullptr) + (t != nullptr);
  if (given != 1)
    return InvalidArgument(node.Label(), ": exactly one of ", suffix_strings, ", ", suffix_ints, ", ", suffix_floats,
                           ", ", tensor_name, " must be given for the ", what, " (", given, " are)");
  if (s) {
    if (s->type != ir::AttrType::kStrings && s->type != ir::AttrType::kString)
      return InvalidArgument(node.Label(), ": ", suffix_strings, " must be a list of strings");
    std::vector<std::string> v = s->type == ir::AttrType::kStrings ? s->strings : std::vector<std::string>{s->s};
    const auto n = static_cast<int64_t>(v.size());
    return Tensor::FromStrings(std::move(v), Shape{n});
  }
  if (i) {
    std::vector<int64_t> v = i->type == ir::AttrType::kInts ? i->ints : std::vector<int64_t>{i->i};
    return Tensor::FromVector(DType::kInt64, v, Shape{static_cast<int64_t>(v.size())});
  }
  if (f) {
    std::vector<float> v = f->type == ir::AttrType::kFloats ? f->floats : std::vector<float>{f->f};
    return Tensor::FromVector(DType::kFloat32, v, Shape{static_cast<int64_t>(v.size())});
  }
  if (t->type != ir::AttrType::kTensor) return InvalidArgument(node.Label(), ": ", tensor_name, " must be a tensor");
  return t->t.Reshaped(Shape{t->t.numel()});
}

bool EncoderType(DType d) {
  return d == DType::kString || d == DType::kInt64 || d == DType::kInt32 || d == DType::kInt16 ||
         d == DType::kFloat32 || d == DType::kFloat64;
}

Result<Mapping> ReadMapping(const ir::Node& node) {
  Mapping m;
  SP_ASSIGN_OR_RETURN(m.keys, ListAttr(node, "keys_strings", "keys_int64s", "keys_floats", "keys_tensor", "keys"));
  SP_ASSIGN_OR_RETURN(m.values,
                      ListAttr(node, "values_strings", "values_int64s", "values_floats", "values_tensor", "values"));
  for (const Tensor* t : {&m.keys, &m.values})
    if (!EncoderType(t->dtype()))
      return Unsupported(node.Label(), ": ", t == &m.keys ? "keys" : "values", " of type ", DTypeName(t->dtype()));
  if (m.keys.numel() != m.values.numel())
    return InvalidArgument(node.Label(), ": ", m.keys.numel(), " keys but ", m.values.numel(), " values");
  const DType vt = m.values.dtype();
  if (const ir::Attribute* d = node.attr("default_tensor")) {
    if (d->type != ir::AttrType::kTensor || d->t.numel() != 1)
      return InvalidArgument(node.Label(), ": default_tensor must be a tensor of one element");
    if (d->t.dtype() != vt)
      return InvalidArgument(node.Label(), ": default_tensor is ", DTypeName(d->t.dtype()), " but the values are ",
                             DTypeName(vt));
    m.dflt = d->t.Reshaped(Shape{});
  } else if (vt == DType::kString) {
    m.dflt = Tensor::FromStrings({node.attr_string("default_string", "_Unused")}, Shape{});
  } else if (IsFloatDType(vt)) {
    m.dflt = Tensor::FromVector(vt, std::vector<float>{node.attr_float("default_float", -0.f)}, Shape{});
  } else {
    m.dflt = Tensor::FromVector(vt, std::vector<int64_t>{node.attr_int("default_int64", -1)}, Shape{});
  }
  return m;
}

// Whether X's type can be looked up among keys of type `k` (same family: strings, integers, floats).
bool KeyTypeMatches(DType x, DType k) {
  if (x == DType::kString || k == DType::kString) return x == k;
  return IsFloatDType(x) == IsFloatDType(k);
}

Status InferLabelEncoder(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_ASSIGN_OR_RETURN(Mapping m, ReadMapping(ctx.node()));
  const DType x = ctx.input_dtype(0);
  if (!EncoderType(x)) return ctx.NotSupported("input of type ", DTypeName(x));
  if (!KeyTypeMatches(x, m.keys.dtype()))
    return ctx.Error("input is ", DTypeName(x), " but the keys are ", DTypeName(m.keys.dtype()));
  ctx.set_output(0, m.values.dtype(), ctx.input_dims(0));
  return Status::Ok();
}

void CopyElement(const Tensor& from, int64_t i, Tensor& to, int64_t j) {
  if (from.is_string()) {
    to.mutable_strings()[j] = from.strings()[i];
    return;
  }
  const size_t es = DTypeSize(from.dtype());
  std::memcpy(static_cast<char*>(to.mutable_raw()) + static_cast<size_t>(j) * es,
              static_cast<const char*>(from.raw()) + static_cast<size_t>(i) * es, es);
}

Status RunLabelEncoder(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(Mapping m, ReadMapping(ctx.node));
  std::unordered_map<std::string, int64_t> index;
  // The first occurrence of a repeated key wins, as in onnxruntime.
  for (int64_t i = 0; i < m.keys.numel(); ++i) index.emplace(KeyOf(m.keys, i), i);
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto it = index.find(KeyOf(x, i));
    if (it == index.end())
      CopyElement(m.dflt, 0, y, i);
    else
      CopyElement(m.values, it->second, y, i);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- CategoryMapper

Status InferCategoryMapper(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  const ir::Attribute* s = ctx.node().attr("cats_strings");
  const ir::Attribute* i = ctx.node().attr("cats_int64s");
  if (s == nullptr || i == nullptr || s->type != ir::AttrType::kStrings || i->type != ir::AttrType::kInts)
    return ctx.Error("cats_strings and cats_int64s are required lists");
  if (s->strings.size() != i->ints.size())
    return ctx.Error(s->strings.size(), " cats_strings but ", i->ints.size(), " cats_int64s");
  const DType x = ctx.input_dtype(0);
  if (x != DType::kString && x != DType::kInt64) return ctx.Error("input must be string or int64, got ", DTypeName(x));
  ctx.set_output(0, x == DType::kString ? DType::kInt64 : DType::kString, ctx.input_dims(0));
  return Status::Ok();
}

Status RunCategoryMapper(KernelContext& ctx) {
  const ir::Attribute* s = ctx.node.attr("cats_strings");
  const ir::Attribute* n = ctx.node.attr("cats_int64s");
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (x.is_string()) {
    std::unordered_map<std::string, int64_t> map;
    for (size_t k = 0; k < s->strings.size(); ++k) map.emplace(s->strings[k], n->ints[k]);
    const int64_t dflt = ctx.node.attr_int("default_int64", -1);
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = map.find(x.strings()[i]);
      y.mutable_data<int64_t>()[i] = it == map.end() ? dflt : it->second;
    }
    return Status::Ok();
  }
  std::unordered_map<int64_t, std::string> map;
  for (size_t k = 0; k < n->ints.size(); ++k) map.emplace(n->ints[k], s->strings[k]);
  const std::string dflt = ctx.node.attr_string("default_string", "_Unused");
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto it = map.find(x.data<int64_t>()[i]);
    y.mutable_strings()[i] = it == map.end() ? dflt : it->second;
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP_DEF({.domain = kDomain,
                        .op_type = "LabelEncoder",
                        .infer = InferLabelEncoder,
                        .run = RunLabelEncoder,
                        .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = kDomain,
                        .op_type = "CategoryMapper",
                        .infer = InferCategoryMapper,
                        .run = RunCategoryMapper,
                        .strings = true});

}  // namespace
}  // namespace sampan::ops::ml
