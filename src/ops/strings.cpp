// The string ops of the default domain: StringConcat, StringSplit, RegexFullMatch (RE2
// syntax, as the spec requires, through Debian's libre2) and StringNormalizer. Strings are
// UTF-8 byte strings; splitting and concatenation work on bytes, case changes on code points.
#include <locale.h>
#include <re2/re2.h>

#include <clocale>
#include <cwctype>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "base/utf8.h"
#include "ops/common.h"
#include "ops/elementwise_util.h"

namespace sampan::ops {
namespace {

Status ExpectString(const InferContext& ctx, size_t i) {
  if (ctx.input_dtype(i) != DType::kString)
    return ctx.Error("input ", i, " must be a string tensor, got ", DTypeName(ctx.input_dtype(i)));
  return Status::Ok();
}

// ---------------------------------------------------------------- StringConcat

Status InferStringConcat(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectString(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectString(ctx, 1));
  return InferBroadcastOutput(ctx, DType::kString);
}

Status RunStringConcat(KernelContext& ctx) {
  BinaryLoop<std::string, std::string, std::string>(ctx.in(0), ctx.in(1), ctx.out(0),
                                                    [](const std::string& a, const std::string& b) { return a + b; });
  return Status::Ok();
}

// ---------------------------------------------------------------- StringSplit

// Python's str.split: with a separator, every occurrence splits (empty pieces kept); without
// one, runs of whitespace split and leading/trailing whitespace is dropped. At most
// `maxsplit` splits when maxsplit >= 0.
std::vector<std::string> SplitOne(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep.empty()) {
    size_t start = 0;
    for (;;) {
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) break;
      const size_t at = s.find(sep, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + sep.size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && space(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.push_back(s.substr(i));  // the rest, trailing whitespace kept (as Python does)
      break;
    }
    size_t j = i;
    while (j < s.size() && !space(s[j])) ++j;
    parts.push_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

Status InferStringSplit(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectString(ctx, 0));
  const ir::Attribute* ms = ctx.node().attr("maxsplit");
  if (ms != nullptr && (ms->type != ir::AttrType::kInt || ms->i < 0))
    return ctx.Error("maxsplit must be a non-negative integer");
  const std::optional<ir::Dims>& in = ctx.input_dims(0);
  // Y: X's shape plus the longest split; Z: the number of pieces of each element.
  if (!in) {
    ctx.set_output(0, DType::kString, std::nullopt);
    ctx.set_output(1, DType::kInt64, std::nullopt);
    return Status::Ok();
  }
  ir::Dims y = *in;
  y.push_back(ir::Dim::Unknown());
  if (const Tensor* x = ctx.input_value(0)) {
    int64_t longest = 0;
    const std::string sep = ctx.node().attr_string("delimiter", "");
    for (int64_t i = 0; i < x->numel(); ++i)
      longest =
          std::max<int64_t>(longest, static_cast<int64_t>(SplitOne(x->strings()[i], sep, ms ? ms->i : -1).size()));
    y.back() = ir::Dim::Known(longest);
  }
  ctx.set_output(0, DType::kString, std::move(y));
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kInt64, *in);
  return Status::Ok();
}

Status RunStringSplit(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const std::string sep = ctx.node.attr_string("delimiter", "");
  const int64_t maxsplit = ctx.node.attr_int("maxsplit", -1);
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
  int64_t longest = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    parts[static_cast<size_t>(i)] = SplitOne(x.strings()[i], sep, maxsplit);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(parts[static_cast<size_t>(i)].size()));
  }
  Shape ys = x.shape();
  ys.push_back(longest);
  SP_ASSIGN_OR_RETURN(Tensor y, Tensor::Zeros(DType::kString, ys));
  std::string* out = y.mutable_strings();
  for (size_t i = 0; i < parts.size(); ++i)
    for (size_t k = 0; k < parts[i].size(); ++k) out[i * static_cast<size_t>(longest) + k] = std::move(parts[i][k]);
  ctx.out(0) = std::move(y);
  if (ctx.outputs.size() > 1 && ctx.node.output(1) != nullptr) {
    Tensor z = Tensor::Alloc(DType::kInt64, x.shape());
    for (size_t i = 0; i < parts.size(); ++i) z.mutable_data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
    ctx.out(1) = std::move(z);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- RegexFullMatch

Result<std::unique_ptr<re2::RE2>> CompilePattern(const ir::Node& node) {
  const ir::Attribute* a = node.attr("pattern");
  if (a == nullptr || a->type != ir::AttrType::kString)
    return InvalidArgument(node.Label(), ": missing required string attribute 'pattern'");
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<re2::RE2>(a->s, options);
  if (!re->ok())
    return InvalidArgument(node.Label(), ": pattern \"", a->s, "\" is not a valid RE2 expression: ", re->error());
  return re;
}

Status InferRegexFullMatch(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectString(ctx, 0));
  SP_RETURN_IF_ERROR(CompilePattern(ctx.node()).status());
  ctx.set_output(0, DType::kBool, ctx.input_dims(0));
  return Status::Ok();
}

Status RunRegexFullMatch(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(std::unique_ptr<re2::RE2> re, CompilePattern(ctx.node));
  const Tensor& x = ctx.in(0);
  bool* y = ctx.out(0).mutable_data<bool>();
  for (int64_t i = 0; i < x.numel(); ++i) y[i] = re2::RE2::FullMatch(x.strings()[i], *re);
  return Status::Ok();
}

// ---------------------------------------------------------------- StringNormalizer

// The C library's case tables for `name` (e.g. "en_US" -> "en_US.UTF-8"), C.UTF-8 when that
// locale is not installed; created once per name.
locale_t CaseLocale(const std::string& name) {
  struct Cache {
    std::mutex mu;
    std::map<std::string, locale_t> by_name;
    ~Cache() {
      for (auto& [n, loc] : by_name)
        if (loc != nullptr) freelocale(loc);
    }
  };
  static Cache cache_holder;
  auto& cache = cache_holder.by_name;
  std::lock_guard<std::mutex> lock(cache_holder.mu);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  locale_t loc = nullptr;
  if (!name.empty()) {
    loc = newlocale(LC_CTYPE_MASK, (name + ".UTF-8").c_str(), nullptr);
    if (loc == nullptr) loc = newlocale(LC_CTYPE_MASK, name.c_str(), nullptr);
  }
  if (loc == nullptr) loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", nullptr);
  cache[name] = loc;  // nullptr: ASCII case mapping only
  return loc;
}

enum class CaseChange { kNone, kLower, kUpper };

std::string ChangeCase(const std::string& s, CaseChange how, locale_t loc) {
  if (how == CaseChange::kNone) return s;
  std::u32string cps;
  if (!DecodeUtf8(s, &cps) || loc == nullptr) {  // ASCII letters only
    std::string out = s;
    for (char& c : out)
      if (how == CaseChange::kLower && c >= 'A' && c <= 'Z')
        c = static_cast<char>(c - 'A' + 'a');
      else if (how == CaseChange::kUpper && c >= 'a' && c <= 'z')
        c = static_cast<char>(c - 'a' + 'A');
    return out;
  }
  for (char32_t& c : cps)
    c = static_cast<char32_t>(how == CaseChange::kLower ? towlower_l(static_cast<wint_t>(c), loc)
                                                        : towupper_l(static_cast<wint_t>(c), loc));
  std::string out;
  for (char32_t c : cps) AppendUtf8(c, &out);
  return out;
}

Result<CaseChange> ParseCaseChange(const ir::Node& node) {
  const std::string a = node.attr_string("case_change_action", "NONE");
  if (a == "NONE") return CaseChange::kNone;
  if (a == "LOWER") return CaseChange::kLower;
  if (a == "UPPER") return CaseChange::kUpper;
  return InvalidArgument(node.Label(), ": case_change_action \"", a, "\" is not one of NONE, LOWER, UPPER");
}

// The elements of X that survive the stop-word filter, in order, case changed.
Result<std::vector<std::string>> Normalize(const ir::Node& node, const Tensor& x) {
  SP_ASSIGN_OR_RETURN(CaseChange how, ParseCaseChange(node));
  const bool sensitive = node.attr_int("is_case_sensitive", 0) != 0;
  locale_t loc = CaseLocale(node.attr_string("locale", ""));
  std::unordered_set<std::string> stops;
  if (const ir::Attribute* a = node.attr("stopwords"); a != nullptr && a->type == ir::AttrType::kStrings)
    for (const std::string& w : a->strings) stops.insert(sensitive ? w : ChangeCase(w, CaseChange::kLower, loc));
  std::vector<std::string> out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::string& s = x.strings()[i];
    if (!stops.empty() && stops.count(sensitive ? s : ChangeCase(s, CaseChange::kLower, loc))) continue;
    out.push_back(ChangeCase(s, how, loc));
  }
  return out;
}

Status InferStringNormalizer(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectString(ctx, 0));
  SP_RETURN_IF_ERROR(ParseCaseChange(ctx.node()).status());
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0) {
    const ir::Dims& d = *ctx.input_dims(0);
    if (rank != 1 && !(rank == 2 && (!d[0].known() || d[0].value == 1)))
      return ctx.Error("input must be [C] or [1, C], got rank ", rank, " ",
                       ir::TensorType{DType::kString, d}.ToString());
  }
  // The output's length depends on how many elements are stop words.
  if (const Tensor* x = ctx.input_value(0)) {
    SP_ASSIGN_OR_RETURN(std::vector<std::string> kept, Normalize(ctx.node(), *x));
    const int64_t c = std::max<int64_t>(1, static_cast<int64_t>(kept.size()));
    ctx.set_output_shape(0, DType::kString, rank == 2 ? Shape{1, c} : Shape{c});
    return Status::Ok();
  }
  if (rank < 0) {
    ctx.set_output(0, DType::kString, std::nullopt);
  } else {
    ir::Dims out = *ctx.input_dims(0);
    out.back() = ir::Dim::Unknown();
    if (rank == 2) out[0] = ir::Dim::Known(1);
    ctx.set_output(0, DType::kString, std::move(out));
  }
  return Status::Ok();
}

Status RunStringNormalizer(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() == 2 && x.dim(0) != 1) return ctx.Error("input must be [C] or [1, C], got ", x.Describe());
  SP_ASSIGN_OR_RETURN(std::vector<std::string> kept, Normalize(ctx.node, x));
  // Everything dropped: one empty string, as the spec says.
  if (kept.empty()) kept.emplace_back();
  const auto c = static_cast<int64_t>(kept.size());
  ctx.out(0) = Tensor::FromStrings(std::move(kept), x.rank() == 2 ? Shape{1, c} : Shape{c});
  return Status::Ok();
}

SAMPAN_REGISTER_OP_DEF(
    {.domain = "", .op_type = "StringConcat", .infer = InferStringConcat, .run = RunStringConcat, .strings = true});
SAMPAN_REGISTER_OP_DEF(
    {.domain = "", .op_type = "StringSplit", .infer = InferStringSplit, .run = RunStringSplit, .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "RegexFullMatch",
                        .infer = InferRegexFullMatch,
                        .run = RunRegexFullMatch,
                        .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "StringNormalizer",
                        .infer = InferStringNormalizer,
                        .run = RunStringNormalizer,
                        .strings = true});

}  // namespace
}  // namespace sampan::ops
