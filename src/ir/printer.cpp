// ir::Graph -> text. See ir/text.h for the syntax.
#include <charconv>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "base/report_util.h"
#include "ir/text.h"

namespace sampan::ir {

namespace {

bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsIdentChar(char c) {
  return IsIdentStart(c) || (c >= '0' && c <= '9') || c == '.';
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || !IsIdentStart(s[0])) return false;
  for (char c : s)
    if (!IsIdentChar(c)) return false;
  return true;
}

// '_' marks an omitted input/output, so a value really named "_" is quoted. Every other
// word of the syntax (graph, const, tensor, ...) is unambiguous where a name can appear.
bool IsKeyword(std::string_view s) {
  return s == "_";
}

std::string Quote(std::string_view s) {
  return QuotedString(s, QuoteStyle::kCLike);
}

std::string Name(std::string_view s) {
  return IsIdentifier(s) && !IsKeyword(s) ? std::string(s) : Quote(s);
}

template <class F>
std::string ShortestFloat(F v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Float attributes must not look like ints.
std::string AttrFloat(float v) {
  std::string s = ShortestFloat(v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf/nan
  return s;
}

std::string Element(const Tensor& t, int64_t i) {
  if (t.is_string()) return Quote(t.strings()[i]);
  std::string s;
  (void)DispatchDType(t.dtype(), [&]<class T>() {
    const T v = t.data<T>()[i];
    if constexpr (std::is_same_v<T, bool>)
      s = v ? "true" : "false";
    else if constexpr (std::is_same_v<T, double>)
      s = ShortestFloat(v);
    else if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>)
      s = ShortestFloat(static_cast<float>(v));
    else if constexpr (std::is_signed_v<T>)
      s = std::to_string(static_cast<int64_t>(v));
    else
      s = std::to_string(static_cast<uint64_t>(v));
  });
  return s;
}

std::string TensorLiteral(const Tensor& t, const PrintOptions& o) {
  std::string s = std::string(DTypeName(t.dtype())) + ShapeToString(t.shape());
  if (!IsStorableDType(t.dtype()) || t.raw() == nullptr) return s;
  const int64_t n = t.numel();
  if (n == 0) return s + " {}";
  if (o.max_elements < 0 || n <= o.max_elements) {
    s += " {";
    for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + Element(t, i);
    return s + "}";
  }
  // Large: keep the data only when every element is the same (a splat).
  const size_t es = DTypeSize(t.dtype());
  if (es == 0) {  // packed 2/4/6-bit elements: compared one by one
    const std::string first = Element(t, 0);
    for (int64_t i = 1; i < n; ++i)
      if (Element(t, i) != first) return s;
    return s + " {" + first + "}";
  }
  const auto* bytes = static_cast<const unsigned char*>(t.raw());
  for (int64_t i = 1; i < n; ++i)
    if (std::memcmp(bytes, bytes + static_cast<size_t>(i) * es, es) != 0) return s;
  bool all_zero = true;
  for (size_t b = 0; b < es; ++b) all_zero &= bytes[b] == 0;
  return all_zero ? s : s + " {" + Element(t, 0) + "}";  // no data reads back as zeros
}

std::string PrintBody(const Graph& graph, const PrintOptions& o, const std::string& indent);

std::string AttrValue(const Attribute& a, const PrintOptions& o, const std::string& indent) {
  std::string s;
  auto list = [&](const char* type_name, size_t n, auto&& item) {
    if (n == 0) return std::string(type_name) + "[]";
    std::string r = "[";
    for (size_t i = 0; i < n; ++i) r += (i ? ", " : "") + item(i);
    return r + "]";
  };
  switch (a.type) {
    case AttrType::kInt:
      return std::to_string(a.i);
    case AttrType::kFloat:
      return AttrFloat(a.f);
    case AttrType::kString:
      return Quote(a.s);
    case AttrType::kTensor:
      return "tensor " + TensorLiteral(a.t, o);
    case AttrType::kInts:
      return list("ints", a.ints.size(), [&](size_t i) { return std::to_string(a.ints[i]); });
    case AttrType::kFloats:
      return list("floats", a.floats.size(), [&](size_t i) { return AttrFloat(a.floats[i]); });
    case AttrType::kStrings:
      return list("strings", a.strings.size(), [&](size_t i) { return Quote(a.strings[i]); });
    case AttrType::kTensors:
      return list("tensors", a.tensors.size(), [&](size_t i) { return "tensor " + TensorLiteral(a.tensors[i], o); });
    case AttrType::kGraph:
      return a.g ? PrintBody(*a.g, o, indent) : std::string("<graph null>");
    case AttrType::kGraphs:
      return "<" + std::to_string(a.graphs.size()) + " graphs>";
  }
  return "?";
}

bool HasType(const TensorType& t) {
  return t.dtype != DType::kUndefined || t.dims.has_value();
}

std::string Typed(const Value* v, bool with_type) {
  std::string s = Name(v->name());
  if (with_type && HasType(v->type)) s += ": " + PrintType(v->type);
  return s;
}

}  // namespace

std::string PrintType(const TensorType& type) {
  std::string s = type.dtype == DType::kUndefined ? "?" : DTypeName(type.dtype);
  if (!type.dims) return s + "[*]";
  s += "[";
  for (size_t i = 0; i < type.dims->size(); ++i) {
    const Dim& d = (*type.dims)[i];
    if (i) s += ",";
    if (d.known())
      s += std::to_string(d.value);
    else if (d.param.empty())
      s += "?";
    else
      s += IsIdentifier(d.param) ? d.param : Quote(d.param);
  }
  return s + "]";
}

namespace {

std::string PrintNodeAt(const Node& node, const PrintOptions& o, const std::string& indent) {
  std::string s;
  for (size_t i = 0; i < node.num_outputs(); ++i) {
    if (i) s += ", ";
    const Value* v = node.output(i);
    s += v ? Typed(v, o.print_types) : "_";
  }
  if (node.num_outputs()) s += " = ";
  if (!node.domain.empty()) s += Name(node.domain) + "::";
  s += Name(node.op_type) + "(";
  // Inputs bound to subgraph captures are implied by the names the subgraphs read.
  for (size_t i = 0; i < node.num_explicit_inputs(); ++i) {
    if (i) s += ", ";
    const Value* v = node.input(i);
    s += v ? Name(v->name()) : "_";
  }
  s += ")";
  if (!node.attrs.empty()) {
    s += " {";
    bool first = true;
    for (const auto& [key, a] : node.attrs) {
      s += (first ? "" : ", ") + Name(key) + "=" + AttrValue(a, o, indent);
      first = false;
    }
    s += "}";
  }
  if (!node.name.empty()) s += " @" + Name(node.name);
  return s;
}

// "graph NAME (inputs) -> (outputs) {" ... "}" with statements at indent + 2 spaces.
std::string PrintBody(const Graph& graph, const PrintOptions& o, const std::string& indent) {
  std::string s = "graph ";
  if (!graph.name.empty()) s += Name(graph.name) + " ";
  s += "(";
  std::unordered_set<const Value*> inputs;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value* v = graph.inputs()[i];
    inputs.insert(v);
    s += (i ? ", " : "") + Typed(v, true);
  }
  s += ") -> (";
  for (size_t i = 0; i < graph.outputs().size(); ++i) s += (i ? ", " : "") + Name(graph.outputs()[i]->name());
  s += ") {\n";
  const std::string inner = indent + "  ";
  for (const Value* v : graph.values())
    if (v->is_constant() && !inputs.count(v))
      s += inner + Name(v->name()) + " = const " + TensorLiteral(v->data, o) + "\n";
  for (const auto& node : graph.nodes()) s += inner + PrintNodeAt(*node, o, inner) + "\n";
  return s + indent + "}";
}

}  // namespace

std::string PrintNode(const Node& node, const PrintOptions& o) {
  return PrintNodeAt(node, o, "");
}

std::string PrintGraph(const Graph& graph) {
  return PrintGraph(graph, PrintOptions{});
}

std::string PrintGraph(const Graph& graph, const PrintOptions& o) {
  std::string s;
  for (const auto& [domain, version] : graph.opsets)
    s += "opset " + (domain.empty() ? std::string() : Name(domain) + " ") + std::to_string(version) + "\n";
  return s + PrintBody(graph, o, "") + "\n";
}

}  // namespace sampan::ir
