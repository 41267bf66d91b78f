// Text -> ir::Graph. See ir/text.h for the syntax. Every error carries LINE:COL
// and what was expected; nothing in the input can make the parser crash.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "ir/subgraph.h"
#include "ir/text.h"
#include "ir/text_lexer.h"

namespace sampan::ir {

using namespace text_detail;  // NOLINT(google-build-using-namespace): tokens are this file's vocabulary

namespace {

// Largest constant the text form will materialise (elements).
constexpr int64_t kMaxTextConstElements = int64_t{1} << 24;

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// One scalar as written in a tensor literal: an optional '-' and a number or word.
struct Scalar {
  bool negative = false;
  Token tok;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Result<std::unique_ptr<Graph>> ParseFile() {
    auto top = std::make_unique<Graph>();
    top_ = top.get();
    Scope scope{top.get(), nullptr, {}, {}, {}};
    s_ = &scope;
    while (IsWord("opset")) SP_RETURN_IF_ERROR(ParseOpset());
    if (!IsWord("graph")) return Expected("'graph' (or an 'opset' line)");
    SP_RETURN_IF_ERROR(ParseGraphDef());
    if (Peek().kind != Tok::kEnd) return Expected("end of input after the graph's closing '}'");
    return top;
  }

  // 'graph' [name] '(' inputs ')' '->' '(' outputs ')' '{' stmts '}' into s_->g. In a subgraph
  // (s_->outer set) a name it uses but does not define is an enclosing value: a capture.
  Status ParseGraphDef() {
    Graph* g = s_->g;
    Next();  // 'graph'
    if (Peek().kind == Tok::kIdent || Peek().kind == Tok::kString) g->name = Next().text;
    SP_RETURN_IF_ERROR(Expect(Tok::kLParen, "'(' starting the graph inputs"));
    if (!Accept(Tok::kRParen)) {
      for (;;) {
        const Token at = Peek();
        SP_ASSIGN_OR_RETURN(std::string name, ParseName("an input name"));
        TensorType type;
        if (Accept(Tok::kColon)) {
          SP_ASSIGN_OR_RETURN(type, ParseTypeExpr());
        }
        SP_ASSIGN_OR_RETURN(Value * v, Define(name, at));
        v->type = std::move(type);
        g->inputs().push_back(v);
        if (Accept(Tok::kRParen)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or ')' in the graph inputs"));
      }
    }
    SP_RETURN_IF_ERROR(Expect(Tok::kArrow, "'->' after the graph inputs"));
    SP_RETURN_IF_ERROR(Expect(Tok::kLParen, "'(' starting the graph outputs"));
    struct PendingOutput {
      std::string name;
      Token at;
      std::optional<TensorType> type;
    };
    std::vector<PendingOutput> outputs;
    if (!Accept(Tok::kRParen)) {
      for (;;) {
        PendingOutput o;
        o.at = Peek();
        SP_ASSIGN_OR_RETURN(o.name, ParseName("an output name"));
        if (Accept(Tok::kColon)) {
          SP_ASSIGN_OR_RETURN(o.type, ParseTypeExpr());
        }
        outputs.push_back(std::move(o));
        if (Accept(Tok::kRParen)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or ')' in the graph outputs"));
      }
    }
    SP_RETURN_IF_ERROR(Expect(Tok::kLBrace, "'{' starting the graph body"));
    while (!Accept(Tok::kRBrace)) {
      if (Peek().kind == Tok::kEnd) return Expected("a statement or '}' closing the graph body");
      SP_RETURN_IF_ERROR(ParseStatement());
    }
    if (s_->outer != nullptr)
      for (const auto& o : outputs)
        if (Value* v = g->FindValue(o.name); v == nullptr || !s_->defined.count(v)) Use(o.name, o.at);
    for (const auto& [v, at] : s_->uses) {
      if (s_->defined.count(v)) continue;
      if (s_->outer == nullptr)
        return ErrorAt(at.line, at.col, "value '", Printable(v->name()),
                       "' is used but never defined (not a graph input, a constant or a node output)");
      g->captures().push_back(v);
      s_->defined.emplace(v, at);
    }
    for (auto& o : outputs) {
      Value* v = g->FindValue(o.name);
      if (v == nullptr || !s_->defined.count(v))
        return ErrorAt(o.at.line, o.at.col, "graph output '", Printable(o.name), "' is never defined");
      if (o.type) {
        const bool unset = v->type.dtype == DType::kUndefined && !v->type.dims;
        if (unset) {
          v->type = *o.type;
        } else if (!(v->type.dtype == o.type->dtype && v->type.dims == o.type->dims)) {
          return ErrorAt(o.at.line, o.at.col, "graph output '", Printable(o.name), "' is declared ", PrintType(*o.type),
                         " but was defined as ", PrintType(v->type));
        }
      }
      g->outputs().push_back(v);
    }
    return Status::Ok();
  }

  // A subgraph attribute: parsed in a scope of its own inside the current one.
  Result<Attribute> ParseSubgraph() {
    auto sub = std::make_shared<Graph>();
    sub->opsets = top_->opsets;
    if (++depth_ > kMaxDepth) return Expected(StrCat("at most ", kMaxDepth, " nested subgraphs"));
    Scope scope{sub.get(), s_, {}, {}, {}};
    Scope* saved = s_;
    s_ = &scope;
    Status st = ParseGraphDef();
    s_ = saved;
    --depth_;
    SP_RETURN_IF_ERROR(st);
    return Attribute::OfGraph(std::move(sub));
  }

  Result<TensorType> ParseLoneType() {
    SP_ASSIGN_OR_RETURN(TensorType t, ParseTypeExpr());
    if (Peek().kind != Tok::kEnd) return Expected("end of input after the type");
    return t;
  }

 private:
  const Token& Peek(size_t k = 0) const {
    const size_t i = pos_ + k;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool Accept(Tok k) {
    if (Peek().kind != k) return false;
    Next();
    return true;
  }
  bool IsWord(const char* w, size_t k = 0) const { return Peek(k).kind == Tok::kIdent && Peek(k).text == w; }
  Status Expected(const std::string& what) const {
    return ErrorAt(Peek().line, Peek().col, "expected ", what, ", got ", Describe(Peek()));
  }
  Status Expect(Tok k, const std::string& what) {
    if (!Accept(k)) return Expected(what);
    return Status::Ok();
  }

  Result<std::string> ParseName(const std::string& what) {
    const Token& t = Peek();
    if (t.kind == Tok::kString) {
      if (t.text.empty()) return Expected(what + " (names cannot be empty; write _ for an omitted input)");
      return Next().text;
    }
    if (t.kind == Tok::kIdent && t.text != "_") return Next().text;
    return Expected(what);
  }

  Status ParseOpset() {
    Next();  // 'opset'
    std::string domain;
    if (Peek().kind == Tok::kIdent || Peek().kind == Tok::kString) domain = Next().text;
    const Token& t = Peek();
    if (t.kind != Tok::kNumber) return Expected("an opset version number");
    int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size() || v < 0)
      return ErrorAt(t.line, t.col, "opset version must be a non-negative integer, got ", Describe(t));
    Next();
    if (!top_->opsets.emplace(domain, v).second)
      return ErrorAt(t.line, t.col, "opset for domain '", Printable(domain), "' is given twice");
    return Status::Ok();
  }

  // A value read by a node or listed as output; created on first mention.
  Value* Use(const std::string& name, const Token& at) {
    Value* v = s_->g->FindValue(name);
    if (v == nullptr) {
      v = s_->g->AddValue(name).value();  // cannot fail: the name is free
    }
    if (!s_->defined.count(v) && !s_->used.count(v)) {
      s_->used.insert(v);
      s_->uses.emplace_back(v, at);
    }
    return v;
  }

  Result<Value*> Define(const std::string& name, const Token& at) {
    Value* v = s_->g->FindValue(name);
    if (v != nullptr) {
      auto d = s_->defined.find(v);
      if (d != s_->defined.end())
        return ErrorAt(at.line, at.col, "value '", Printable(name), "' is defined twice (first at ", d->second.line,
                       ":", d->second.col, ")");
    } else {
      SP_ASSIGN_OR_RETURN(v, s_->g->AddValue(name));
    }
    s_->defined.emplace(v, at);
    return v;
  }

  Result<DType> ParseDType() {
    const Token& t = Peek();
    if (t.kind == Tok::kQuestion) {
      Next();
      return DType::kUndefined;
    }
    if (t.kind == Tok::kIdent) {
      DType d = DTypeFromName(t.text);
      if (d != DType::kUndefined || t.text == "undefined") {
        Next();
        return d;
      }
      return ErrorAt(t.line, t.col, "unknown element type '", Printable(t.text),
                     "' (expected f32, f16, bf16, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool, ... or ?)");
    }
    return Expected("an element type (f32, i64, bool, ...)");
  }

  Result<int64_t> ParseNonNegInt(const char* what) {
    const Token& t = Peek();
    if (t.kind != Tok::kNumber) return Expected(what);
    int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
      return ErrorAt(t.line, t.col, "expected ", what, ", got ", Describe(t));
    Next();
    return v;
  }

  Result<TensorType> ParseTypeExpr() {
    TensorType type;
    SP_ASSIGN_OR_RETURN(type.dtype, ParseDType());
    if (!Accept(Tok::kLBracket)) return type;  // no brackets: unknown rank
    if (Accept(Tok::kStar)) {
      SP_RETURN_IF_ERROR(Expect(Tok::kRBracket, "']' after '*'"));
      return type;
    }
    type.dims = Dims{};
    if (Accept(Tok::kRBracket)) return type;
    for (;;) {
      const Token& t = Peek();
      if (t.kind == Tok::kNumber) {
        SP_ASSIGN_OR_RETURN(int64_t v, ParseNonNegInt("a dimension (a non-negative integer, a symbol or ?)"));
        type.dims->push_back(Dim::Known(v));
      } else if (t.kind == Tok::kQuestion) {
        Next();
        type.dims->push_back(Dim::Unknown());
      } else if (t.kind == Tok::kIdent || (t.kind == Tok::kString && !t.text.empty())) {
        type.dims->push_back(Dim::Symbol(Next().text));
      } else if (t.kind == Tok::kMinus) {
        return ErrorAt(t.line, t.col, "dimensions cannot be negative (write ? for an unknown dimension)");
      } else {
        return Expected("a dimension (a non-negative integer, a symbol or ?)");
      }
      if (Accept(Tok::kRBracket)) break;
      SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or ']' in the dimension list"));
    }
    return type;
  }

  Result<Scalar> ParseScalar(const char* what) {
    Scalar s;
    if (Accept(Tok::kMinus)) s.negative = true;
    const Token& t = Peek();
    if (t.kind == Tok::kNumber ||
        (t.kind == Tok::kIdent &&
         (t.text == "inf" || t.text == "nan" || (!s.negative && (t.text == "true" || t.text == "false"))))) {
      s.tok = Next();
      return s;
    }
    return Expected(what);
  }

  static bool LooksFloat(const Scalar& s) {
    return s.tok.kind == Tok::kIdent ? (s.tok.text == "inf" || s.tok.text == "nan")
                                     : s.tok.text.find_first_of(".eE") != std::string::npos;
  }

  template <class F>
  static Result<F> ToFloat(const Scalar& s) {
    F v{};
    if (s.tok.kind == Tok::kIdent) {
      if (s.tok.text == "inf")
        v = std::numeric_limits<F>::infinity();
      else if (s.tok.text == "nan")
        v = std::numeric_limits<F>::quiet_NaN();
      else
        return ErrorAt(s.tok.line, s.tok.col, "expected a number, got ", Describe(s.tok));
    } else {
      const char* b = s.tok.text.data();
      const char* e = b + s.tok.text.size();
      auto r = std::from_chars(b, e, v);
      if (r.ptr != e || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
        return ErrorAt(s.tok.line, s.tok.col, "malformed number ", Describe(s.tok));
      if (r.ec == std::errc::result_out_of_range) {
        // Subnormal, underflow or overflow: strtod gives the nearest value (denormal, 0 or inf).
        const std::string text = s.tok.text;
        if constexpr (std::is_same_v<F, float>)
          v = std::strtof(text.c_str(), nullptr);
        else
          v = std::strtod(text.c_str(), nullptr);
      }
    }
    return s.negative ? -v : v;
  }

  // Converts a scalar to element type T, checking it fits.
  template <class T>
  static Result<T> ToElement(const Scalar& s, DType dtype) {
    const Token& t = s.tok;
    if constexpr (std::is_same_v<T, bool>) {
      if (t.kind == Tok::kIdent && (t.text == "true" || t.text == "false")) return t.text == "true";
      if (t.kind == Tok::kNumber && !s.negative && (t.text == "0" || t.text == "1")) return t.text == "1";
      return ErrorAt(t.line, t.col, "expected true, false, 0 or 1 for a bool element, got ", Describe(t));
    } else if constexpr (std::is_same_v<T, double>) {
      return ToFloat<double>(s);
    } else if constexpr (std::is_same_v<T, float> || kIsReducedFloat<T>) {
      if (t.kind == Tok::kIdent && (t.text == "true" || t.text == "false"))
        return ErrorAt(t.line, t.col, "expected a number for a ", DTypeName(dtype), " element, got ", Describe(t));
      SP_ASSIGN_OR_RETURN(float f, ToFloat<float>(s));
      return ConvertElement<T>(f);
    } else {
      if (t.kind != Tok::kNumber || LooksFloat(s))
        return ErrorAt(t.line, t.col, "expected an integer for a ", DTypeName(dtype), " element, got ",
                       s.negative ? "-" : "", Describe(t));
      uint64_t mag = 0;
      auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), mag);
      const bool parsed = r.ec == std::errc() && r.ptr == t.text.data() + t.text.size();
      bool fits = parsed;
      if (fits) {
        if (s.negative) {
          fits = std::is_signed_v<T> &&
                 mag <= static_cast<uint64_t>(-(static_cast<int64_t>(std::numeric_limits<T>::min()) + 1)) + 1;
        } else {
          fits = mag <= static_cast<uint64_t>(std::numeric_limits<T>::max());
        }
      }
      if (!fits)
        return ErrorAt(t.line, t.col, "value ", s.negative ? "-" : "", Printable(t.text), " does not fit ",
                       DTypeName(dtype));
      if (s.negative) return static_cast<T>(static_cast<int64_t>(0 - mag));
      return static_cast<T>(mag);
    }
  }

  // The values of a string tensor: ['{' "a", "b" '}'] (one value fills every element; none: "").
  Result<Tensor> ParseStringValues(Tensor t) {
    const int64_t n = t.numel();
    const Token open = Peek();
    if (!Accept(Tok::kLBrace)) return t;
    std::vector<std::string> values;
    if (!Accept(Tok::kRBrace)) {
      for (;;) {
        const Token tok = Peek();
        if (tok.kind != Tok::kString)
          return ErrorAt(tok.line, tok.col, "expected a quoted string element, got ", Describe(tok));
        Next();
        if (static_cast<int64_t>(values.size()) >= std::max<int64_t>(n, 1))
          return ErrorAt(tok.line, tok.col, "too many values for string", ShapeToString(t.shape()), " (it has ", n,
                         " elements)");
        values.push_back(tok.text);
        if (Accept(Tok::kRBrace)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or '}' in the tensor values"));
      }
    }
    const bool splat = values.size() == 1 && n > 1;
    if (!splat && static_cast<int64_t>(values.size()) != n)
      return ErrorAt(open.line, open.col, "string", ShapeToString(t.shape()), " needs ", n,
                     " values (or one to fill it), got ", values.size());
    std::string* p = t.mutable_strings();
    for (int64_t i = 0; i < n; ++i) p[i] = values[splat ? 0 : static_cast<size_t>(i)];
    return t;
  }

  // DTYPE '[' dims ']' ['{' values '}' | 'random'] with static dims.
  Result<Tensor> ParseTensorLiteral(const std::string& seed_name) {
    const Token at = Peek();
    SP_ASSIGN_OR_RETURN(TensorType type, ParseTypeExpr());
    if (!IsStorableDType(type.dtype))
      return ErrorAt(at.line, at.col, "tensors of element type ",
                     type.dtype == DType::kUndefined ? "?" : DTypeName(type.dtype),
                     " cannot be written (use f32, f16, bf16, f64, an integer type, bool or string)");
    if (!type.is_static())
      return ErrorAt(at.line, at.col, "a tensor needs a fully known shape like f32[2,3], got ", PrintType(type));
    const Shape shape = type.static_shape();
    Status st = CheckShape(shape, kMaxTextConstElements);
    if (!st.ok()) return ErrorAt(at.line, at.col, "tensor ", PrintType(type), " is too large for the text form");
    const int64_t n = NumElements(shape);
    Tensor t = Tensor::Alloc(type.dtype, shape);
    if (t.numel() > 0 && t.raw() == nullptr) return ErrorAt(at.line, at.col, "cannot allocate ", PrintType(type));
    if (type.dtype == DType::kString) return ParseStringValues(std::move(t));
    if (IsWord("random")) {
      Next();
      std::mt19937_64 rng(Fnv1a(seed_name));
      (void)DispatchDType(type.dtype, [&]<class T>() {
        T* p = t.mutable_data<T>();
        std::uniform_real_distribution<float> real(-1.f, 1.f);
        std::uniform_int_distribution<int> small(0, 9);
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (std::is_same_v<T, bool>)
            p[i] = small(rng) < 5;
          else if constexpr (std::is_integral_v<T>)
            p[i] = static_cast<T>(small(rng));
          else
            p[i] = ConvertElement<T>(real(rng));
        }
      });
      return t;
    }
    const Token open = Peek();
    if (!Accept(Tok::kLBrace)) return t;  // zeros
    std::vector<Scalar> values;
    if (!Accept(Tok::kRBrace)) {
      for (;;) {
        SP_ASSIGN_OR_RETURN(Scalar s, ParseScalar("a tensor element (a number, inf, nan, true or false)"));
        if (static_cast<int64_t>(values.size()) >= std::max<int64_t>(n, 1))
          return ErrorAt(s.tok.line, s.tok.col, "too many values for ", PrintType(type), " (it has ", n, " elements)");
        values.push_back(std::move(s));
        if (Accept(Tok::kRBrace)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or '}' in the tensor values"));
      }
    }
    const bool splat = values.size() == 1 && n > 1;
    if (!splat && static_cast<int64_t>(values.size()) != n)
      return ErrorAt(open.line, open.col, PrintType(type), " needs ", n, " values (or one to fill it), got ",
                     values.size());
    Status conv = Status::Ok();
    (void)DispatchDType(type.dtype, [&]<class T>() {
      T* p = t.mutable_data<T>();
      for (size_t i = 0; i < values.size() && conv.ok(); ++i) {
        Result<T> v = ToElement<T>(values[i], type.dtype);
        if (!v.ok()) {
          conv = v.status();
          return;
        }
        p[i] = *v;
      }
      if (splat)
        for (int64_t i = 1; i < n; ++i) p[i] = p[0];
    });
    SP_RETURN_IF_ERROR(conv);
    return t;
  }

  Result<Attribute> ParseList(std::optional<AttrType> declared, const Token& open) {
    // '[' already consumed.
    std::vector<Scalar> nums;
    std::vector<std::string> strs;
    std::vector<Tensor> tensors;
    int tensor_index = 0;
    if (!Accept(Tok::kRBracket)) {
      for (;;) {
        const Token& t = Peek();
        if (t.kind == Tok::kString) {
          strs.push_back(Next().text);
        } else if (IsWord("tensor")) {
          Next();
          SP_ASSIGN_OR_RETURN(Tensor v, ParseTensorLiteral(StrCat("tensor", tensor_index++)));
          tensors.push_back(std::move(v));
        } else {
          SP_ASSIGN_OR_RETURN(Scalar s, ParseScalar("a list item (a number, a string or a tensor)"));
          if (s.tok.kind == Tok::kIdent && (s.tok.text == "true" || s.tok.text == "false"))
            return ErrorAt(s.tok.line, s.tok.col, "attributes have no booleans: write 1 or 0");
          nums.push_back(std::move(s));
        }
        if ((!nums.empty()) + (!strs.empty()) + (!tensors.empty()) > 1)
          return ErrorAt(t.line, t.col, "a list must hold only numbers, only strings or only tensors");
        if (Accept(Tok::kRBracket)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or ']' in the list"));
      }
    }
    AttrType type;
    if (!strs.empty())
      type = AttrType::kStrings;
    else if (!tensors.empty())
      type = AttrType::kTensors;
    else if (!nums.empty()) {
      bool any_float = false;
      for (const auto& s : nums) any_float |= LooksFloat(s);
      type = any_float ? AttrType::kFloats : AttrType::kInts;
      if (declared == AttrType::kFloats) type = AttrType::kFloats;
    } else {
      if (!declared)
        return ErrorAt(open.line, open.col, "an empty list needs its type: ints[], floats[], strings[] or tensors[]");
      type = *declared;
    }
    if (declared && *declared != type)
      return ErrorAt(open.line, open.col, "list declared ", AttrTypeName(*declared), " holds ", AttrTypeName(type));
    Attribute a;
    a.type = type;
    if (type == AttrType::kStrings) a.strings = std::move(strs);
    if (type == AttrType::kTensors) a.tensors = std::move(tensors);
    for (const auto& s : nums) {
      if (type == AttrType::kInts) {
        SP_ASSIGN_OR_RETURN(int64_t v, ToElement<int64_t>(s, DType::kInt64));
        a.ints.push_back(v);
      } else {
        SP_ASSIGN_OR_RETURN(float v, ToFloat<float>(s));
        a.floats.push_back(v);
      }
    }
    return a;
  }

  Result<Attribute> ParseAttrValue() {
    const Token t = Peek();
    if (t.kind == Tok::kString) return Attribute::String(Next().text);
    if (t.kind == Tok::kLBracket) {
      Next();
      return ParseList(std::nullopt, t);
    }
    if (t.kind == Tok::kIdent && Peek(1).kind == Tok::kLBracket &&
        (t.text == "ints" || t.text == "floats" || t.text == "strings" || t.text == "tensors")) {
      Next();
      Next();
      const AttrType declared = t.text == "ints"      ? AttrType::kInts
                                : t.text == "floats"  ? AttrType::kFloats
                                : t.text == "strings" ? AttrType::kStrings
                                                      : AttrType::kTensors;
      return ParseList(declared, t);
    }
    if (IsWord("graph") &&
        (Peek(1).kind == Tok::kLParen || Peek(1).kind == Tok::kIdent || Peek(1).kind == Tok::kString))
      return ParseSubgraph();
    if (IsWord("tensor")) {
      Next();
      SP_ASSIGN_OR_RETURN(Tensor v, ParseTensorLiteral("tensor"));
      return Attribute::OfTensor(std::move(v));
    }
    if (t.kind == Tok::kNumber || t.kind == Tok::kMinus || IsWord("inf") || IsWord("nan")) {
      SP_ASSIGN_OR_RETURN(Scalar s, ParseScalar("a number"));
      if (LooksFloat(s)) {
        SP_ASSIGN_OR_RETURN(float f, ToFloat<float>(s));
        return Attribute::Float(f);
      }
      SP_ASSIGN_OR_RETURN(int64_t i, ToElement<int64_t>(s, DType::kInt64));
      return Attribute::Int(i);
    }
    return Expected("an attribute value (an int, a float like 1.0, a \"string\", a [list] or tensor f32[..] {..})");
  }

  Status ParseAttrs(Node* node) {
    // '{' already consumed.
    if (Accept(Tok::kRBrace)) return Status::Ok();
    for (;;) {
      const Token at = Peek();
      SP_ASSIGN_OR_RETURN(std::string key, ParseName("an attribute name"));
      SP_RETURN_IF_ERROR(Expect(Tok::kEq, StrCat("'=' after attribute name '", Printable(key), "'")));
      SP_ASSIGN_OR_RETURN(Attribute a, ParseAttrValue());
      if (!node->attrs.emplace(key, std::move(a)).second)
        return ErrorAt(at.line, at.col, "attribute '", Printable(key), "' is given twice");
      if (Accept(Tok::kRBrace)) return Status::Ok();
      SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or '}' in the attributes"));
    }
  }

  Status ParseStatement() {
    struct Out {
      bool omitted = false;
      std::string name;
      Token at;
      std::optional<TensorType> type;
    };
    std::vector<Out> outs;
    const Token start = Peek();
    // No outputs: the statement starts with the op: Foo(...) or dom::Foo(...).
    const bool bare_call = (start.kind == Tok::kIdent || start.kind == Tok::kString) &&
                           (Peek(1).kind == Tok::kLParen || Peek(1).kind == Tok::kColonColon);
    if (!bare_call) {
      for (;;) {
        Out o;
        o.at = Peek();
        if (Peek().kind == Tok::kIdent && Peek().text == "_") {
          Next();
          o.omitted = true;
        } else {
          SP_ASSIGN_OR_RETURN(o.name, ParseName("a statement (an output name, or '}' closing the graph)"));
          if (Accept(Tok::kColon)) {
            SP_ASSIGN_OR_RETURN(o.type, ParseTypeExpr());
          }
        }
        outs.push_back(std::move(o));
        if (Accept(Tok::kEq)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or '=' after an output name"));
      }
    }

    if (!bare_call && IsWord("const") && Peek(1).kind != Tok::kLParen && Peek(1).kind != Tok::kColonColon) {
      Next();
      if (outs.size() != 1 || outs[0].omitted)
        return ErrorAt(start.line, start.col, "a constant defines exactly one named value");
      if (outs[0].type)
        return ErrorAt(outs[0].at.line, outs[0].at.col, "a constant's type follows 'const' (x = const f32[2] {1, 2})");
      SP_ASSIGN_OR_RETURN(Tensor data, ParseTensorLiteral(outs[0].name));
      SP_ASSIGN_OR_RETURN(Value * v, Define(outs[0].name, outs[0].at));
      v->type = TensorType::Static(data.dtype(), data.shape());
      v->data = std::move(data);
      return Status::Ok();
    }

    std::string domain;
    const Token op_at = Peek();
    SP_ASSIGN_OR_RETURN(std::string op, ParseName("an op type (e.g. Relu) or 'const'"));
    if (Accept(Tok::kColonColon)) {
      domain = std::move(op);
      SP_ASSIGN_OR_RETURN(op, ParseName(StrCat("an op type after '", Printable(domain), "::'")));
    }
    SP_RETURN_IF_ERROR(Expect(Tok::kLParen, StrCat("'(' after op type '", Printable(op), "'")));
    std::vector<Value*> inputs;
    if (!Accept(Tok::kRParen)) {
      for (;;) {
        const Token at = Peek();
        if (at.kind == Tok::kIdent && at.text == "_") {
          Next();
          inputs.push_back(nullptr);
        } else {
          SP_ASSIGN_OR_RETURN(std::string name, ParseName("an input name or _ (omitted input)"));
          inputs.push_back(Use(name, at));
        }
        if (Accept(Tok::kRParen)) break;
        SP_RETURN_IF_ERROR(Expect(Tok::kComma, "',' or ')' in the op's inputs"));
      }
    }
    std::vector<Value*> outputs;
    for (auto& o : outs) {
      if (o.omitted) {
        outputs.push_back(nullptr);
        continue;
      }
      SP_ASSIGN_OR_RETURN(Value * v, Define(o.name, o.at));
      if (o.type) v->type = *o.type;
      outputs.push_back(v);
    }
    Result<Node*> node = s_->g->AddNode(op, inputs, outputs);
    if (!node.ok()) return ErrorAt(op_at.line, op_at.col, node.status().message());
    (*node)->domain = domain == "ai.onnx" ? "" : domain;
    if (Accept(Tok::kLBrace)) SP_RETURN_IF_ERROR(ParseAttrs(*node));
    // Enclosing values the node's subgraphs read become its trailing inputs.
    Status bound = BindCaptures(*node, [&](const std::string& name) { return Use(name, op_at); });
    if (!bound.ok()) return ErrorAt(op_at.line, op_at.col, bound.message());
    if (Accept(Tok::kAt)) {
      SP_ASSIGN_OR_RETURN((*node)->name, ParseName("a node name after '@'"));
    }
    return Status::Ok();
  }

  // One graph being parsed: the file's graph, or a subgraph inside `outer`.
  struct Scope {
    Graph* g = nullptr;
    Scope* outer = nullptr;
    std::unordered_map<const Value*, Token> defined;
    std::unordered_set<const Value*> used;
    std::vector<std::pair<Value*, Token>> uses;  // first use of each value not yet defined then
  };
  static constexpr int kMaxDepth = 32;

  std::vector<Token> toks_;
  size_t pos_ = 0;
  Graph* top_ = nullptr;
  Scope* s_ = nullptr;
  int depth_ = 0;
};

}  // namespace

Result<std::unique_ptr<Graph>> ParseGraph(std::string_view text) {
  SP_ASSIGN_OR_RETURN(std::vector<Token> toks, Lex(text));
  Parser p(std::move(toks));
  return p.ParseFile();
}

Result<TensorType> ParseType(std::string_view text) {
  SP_ASSIGN_OR_RETURN(std::vector<Token> toks, Lex(text));
  Parser p(std::move(toks));
  return p.ParseLoneType();
}

}  // namespace sampan::ir
